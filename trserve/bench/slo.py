"""Latency targets on open-loop load: a verdict for one measured window, and the bisection over Poisson rates that
finds the highest rate meeting them, in the planner's terms (``trsim.plan_open.max_rate`` and its ``open_run``).

A window meets the targets when it finished requests without errors, its TPOT p99 and TTFT p99 are within the
targets (percentiles by linear interpolation, as the simulator's ``numpy.percentile``) and it was stable: the
backlog at its end (arrived, not finished) is at most ``1.5 x rate x p90 end-to-end latency + 8``, Little's law
with room, and it finished about as many requests as arrived in it, as the planner checks (an overload whose
extra arrivals wait for admission decodes the admitted ones at full speed, and their growing latencies keep
Little's law; without a TTFT target only the count catches it). The search raises a guess by half while it meets
the targets, then halves the bracket ``steps`` times; unlike the planner's, every probe is kept, and the caller's
``measure`` may run anything (a real server, a simulator, a script).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trsim.plan_open import MAX_RAISES, keeps_pace

#: The planner's stability margin: backlog <= BACKLOG_FACTOR x rate x latency p90 + BACKLOG_SLACK.
BACKLOG_FACTOR = 1.5
BACKLOG_SLACK = 8


@dataclass(frozen=True)
class Targets:
    """p99 latency targets in milliseconds; ``None`` leaves one unchecked (at least one must be set)."""

    tpot_p99_ms: float | None
    ttft_p99_ms: float | None

    def __post_init__(self) -> None:
        if self.tpot_p99_ms is None and self.ttft_p99_ms is None:
            raise ValueError("needs a TPOT or a TTFT target")
        if any(t is not None and not t > 0 for t in (self.tpot_p99_ms, self.ttft_p99_ms)):
            raise ValueError(f"targets must be > 0 ms, got {self.tpot_p99_ms} and {self.ttft_p99_ms}")


@dataclass(frozen=True)
class Verdict:
    """One window against the targets: its p99s (ms), p90 latency (s), backlog, the bound and why it failed."""

    rate_rps: float
    meets: bool
    tpot_p99_ms: float | None
    ttft_p99_ms: float | None
    latency_p90_s: float | None
    num_finished: int
    num_errors: int
    backlog: int
    backlog_limit: float | None
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons)}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile by linear interpolation (``numpy.percentile``'s default); ``None`` when empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def judge(rate_rps: float, tpot_s: Sequence[float], ttft_s: Sequence[float], e2e_s: Sequence[float],
          backlog: int, num_errors: int, targets: Targets, window_s: float | None = None) -> Verdict:  # fmt: skip
    """The verdict on one window at ``rate_rps``: per-request TPOT, TTFT and end-to-end latency (seconds) of the
    requests that finished in it, the backlog at its end and the errors (any error fails the window). Given the
    window's length, it must also finish about the requests that arrive in it (``trsim.plan_open.keeps_pace``)."""
    tpot, ttft = _ms(percentile(tpot_s, 99)), _ms(percentile(ttft_s, 99))
    p90 = percentile(e2e_s, 90)
    limit = None if p90 is None else BACKLOG_FACTOR * rate_rps * p90 + BACKLOG_SLACK
    reasons = []
    if num_errors:
        reasons.append(f"{num_errors} errors")
    if limit is None:
        reasons.append("no request finished")
    elif backlog > limit:
        reasons.append(f"backlog {backlog} > {limit:.1f}")
    if window_s is not None and not keeps_pace(rate_rps, len(e2e_s), window_s):
        reasons.append(f"finished {len(e2e_s)} of about {rate_rps * window_s:.1f} arrivals")
    for name, value, target in (("TPOT", tpot, targets.tpot_p99_ms), ("TTFT", ttft, targets.ttft_p99_ms)):
        if target is not None and (value is None or value > target):
            reasons.append(f"{name} p99 {'none' if value is None else f'{value:.1f}'} > {target:g} ms")
    return Verdict(rate_rps, not reasons, tpot, ttft, p90, len(e2e_s), num_errors, backlog, limit, tuple(reasons))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


@dataclass
class Search:
    """What :func:`bisect_rate` found: the highest rate that met (0 when none did), the bracket (last met, first
    failed; ``upper_failed`` False when the raises ran out before a rate failed) and every probe in order."""

    max_rate_rps: float = 0.0
    bracket_rps: tuple[float, float] = (0.0, 0.0)
    upper_failed: bool = False
    probes: list[Verdict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"max_rate_rps": self.max_rate_rps, "bracket_rps": list(self.bracket_rps),
                "upper_failed": self.upper_failed, "probes": [p.to_dict() for p in self.probes]}  # fmt: skip


def bisect_rate(
    measure: Callable[[float], Verdict], guess_rps: float, steps: int, max_raises: int = MAX_RAISES
) -> Search:
    """Probe ``guess_rps``; while a rate meets the targets raise it by half (at most ``max_raises`` probed raises,
    the planner's by default; after the last one met, half as much again is the bracket's unprobed top), then
    halve the bracket ``steps`` times, keeping the highest rate that met."""
    if not guess_rps > 0 or steps < 0 or max_raises < 0:
        raise ValueError(f"needs guess > 0, steps >= 0, raises >= 0; got {guess_rps}, {steps}, {max_raises}")
    out, lo, hi = Search(), 0.0, guess_rps
    for _ in range(max_raises + 1):
        out.probes.append(measure(hi))
        if not out.probes[-1].meets:
            out.upper_failed = True
            break
        lo, hi = hi, hi * 1.5
    for _ in range(steps):
        mid = (lo + hi) / 2
        out.probes.append(measure(mid))
        if out.probes[-1].meets:
            lo = mid
        else:
            hi, out.upper_failed = mid, True
    out.max_rate_rps, out.bracket_rps = lo, (lo, hi)
    return out
