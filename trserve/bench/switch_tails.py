"""TPOT tails around the adaptive controller's switches (issue #27's "p99 TPOT in the 10 s after a switch is at
most 1.2x the phase's steady p99"), from a phased run's requests.

A request belongs to the time it finished (its TPOT is only known then). After a switch at ``s``: the requests
that finished in ``[s, s + window_s)``. The phase's steady p99: the requests that finished in that phase's span
outside every such window. Too few requests on either side (``min_requests``) gives None, not a ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trserve.bench.client import RequestRecord
from trserve.bench.phased import LoadPhase, phase_at, phase_starts


def tpot_s(rec: RequestRecord) -> float | None:
    """Seconds per output token after the first, for a request answered with at least two tokens."""
    if rec.error is not None or rec.first is None or rec.done is None or rec.num_tokens < 2:
        return None
    return (rec.done - rec.first) / (rec.num_tokens - 1)


def finished_tpots(records: Sequence[RequestRecord], start: float) -> list[tuple[float, float]]:
    """(finish time from ``start``, TPOT) of every request with a TPOT."""
    out = []
    for rec in records:
        tpot = tpot_s(rec)
        if tpot is not None and rec.done is not None:
            out.append((rec.done - start, tpot))
    return out


def _p99(values: list[float], q: float, min_requests: int) -> float | None:
    return float(np.quantile(values, q)) if len(values) >= min_requests else None


def tails_after_switches(phases: Sequence[LoadPhase], records: Sequence[RequestRecord], start: float,
                         switches: Sequence[float], window_s: float = 10.0, q: float = 0.99,
                         min_requests: int = 20) -> list[dict[str, Any]]:  # fmt: skip
    """Per switch (seconds from ``start``): its phase, the ``q`` quantile of TPOT in the window after it and in
    its phase's steady state, their ratio, and how many requests each side has."""
    done = finished_tpots(records, start)
    bounds = phase_starts(phases)

    def after_any(t: float) -> bool:
        return any(s <= t < s + window_s for s in switches)

    out = []
    for s in switches:
        k = phase_at(phases, s)
        after = [v for t, v in done if s <= t < s + window_s]
        steady = [v for t, v in done if bounds[k] <= t < bounds[k + 1] and not after_any(t)]
        p_after, p_steady = _p99(after, q, min_requests), _p99(steady, q, min_requests)
        ratio = None if p_after is None or p_steady is None else p_after / p_steady
        out.append({"time_s": s, "phase": k, "num_after": len(after), "num_steady": len(steady),
                    "tpot_after_s": p_after, "tpot_steady_s": p_steady, "ratio": ratio})  # fmt: skip
    return out
