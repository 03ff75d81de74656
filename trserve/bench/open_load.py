"""The open-loop load of ``tokenrouter bench --rate`` / ``--arrivals``: Poisson arrivals at each rate or one replayed
trace per cell, and the checks of both options (one-line errors naming the option).

A window of Poisson load at rate ``r`` is :func:`trserve.bench.arrivals.poisson` over the run (warm-up and window)
with seed ``seed + k`` for repetition ``k``: every system sees the same arrival times in its ``k``-th window, and
the repetitions sample different draws. A trace (:func:`trserve.bench.arrivals.read_trace`: one time in seconds per
line, a JSON list, or JSON lines with ``arrival_s``; seconds from the start of the warm-up) is replayed as it is in
every window; arrivals after the window's end are not sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.bench.arrivals import Arrivals, poisson, read_trace

#: Under open load the routed systems' thresholds are a table keyed by the number of active requests at these
#: counts (the closed loop's default concurrencies), the optimizer's B* at each.
TABLE_CONCURRENCIES = (1, 4, 8, 16)


@dataclass(frozen=True)
class OpenLoad:
    """Open-loop load: Poisson windows at each of ``rates`` (requests/s), or the replayed ``trace`` (one cell)."""

    rates: tuple[float, ...] = ()
    trace: Arrivals | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if bool(self.rates) == (self.trace is not None):
            raise ValueError("an open-loop load needs either rates or an arrivals trace, not both")

    @property
    def keys(self) -> tuple[float | None, ...]:
        """One cell per key: a rate, or None for the trace."""
        return self.rates if self.rates else (None,)

    def arrivals(self, rate: float | None, rep: int, duration_s: float) -> Arrivals:
        """Repetition ``rep``'s arrival times at ``rate`` over ``duration_s`` (the trace itself for None)."""
        if rate is None:
            assert self.trace is not None
            return self.trace
        return poisson(rate, duration_s, self.seed + rep)

    def to_dict(self) -> dict[str, Any]:
        """What a bench JSON records of the load."""
        if self.trace is not None:
            return {"kind": "trace", "trace": self.trace.to_dict(), "times_s": list(self.trace.times_s)}
        return {"kind": "poisson", "rates_rps": list(self.rates), "seed": self.seed,
                "seeds": "window k of every system draws seed + k"}  # fmt: skip


def parse_rates(text: str) -> tuple[float, ...]:
    """``--rate``: comma-separated requests/s, each finite and > 0."""
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError("--rate", f"must be comma-separated numbers (requests/s), got {text!r}") from None
    if not rates:
        raise ConfigError("--rate", f"needs at least one rate (requests/s), got {text!r}")
    for k, rate in enumerate(rates):
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError("--rate", f"must be finite and > 0 requests/s, got {rate:g}")
        if rate in rates[:k]:  # its cells would run twice under one key
            raise ConfigError("--rate", f"{rate:g} requests/s is given twice, in {text!r}")
    return rates


def load_trace(path: Path, warmup_s: float, window_s: float) -> Arrivals:
    """``--arrivals``: the trace at ``path``, refused when no arrival falls in the measured window."""
    trace = read_trace(path)
    if not any(warmup_s <= t < warmup_s + window_s for t in trace.times_s):
        raise ConfigError("--arrivals", f"{path}: no arrival in the measured window [{warmup_s:g}, "
                          f"{warmup_s + window_s:g}) s (times are seconds from the start of the warm-up)")  # fmt: skip
    return trace


#: The most arrivals a rate may expect in one measured window: each is an HTTP request of one client process (a
#: bench of this machine falls behind near a few thousand a second), and a rate far beyond drew its arrivals for
#: minutes before anything started (``--rate 1e9``: 2.5e9 times held in memory).
MAX_WINDOW_ARRIVALS = 1_000_000


def rate_options(rate: str | None, seed: int | None, window_s: float) -> tuple[float, ...]:
    """``--rate`` and ``--arrival-seed`` (bench and crossval): the rates, none without ``--rate``; a seed without
    rates is refused, and so is a rate that expects less than one arrival in the measured ``window_s``, or more
    than :data:`MAX_WINDOW_ARRIVALS`."""
    if seed is not None and rate is None:
        raise ConfigError("--arrival-seed", "seeds the Poisson arrivals of --rate; give --rate too")
    rates = parse_rates(rate) if rate is not None else ()
    for r in rates:
        if r * window_s < 1:
            raise ConfigError("--rate", f"{r:g} requests/s expects {r * window_s:.2g} arrivals in the {window_s:g} s "
                              f"measured window; give at least {1 / window_s:.3g}")  # fmt: skip
        if r * window_s > MAX_WINDOW_ARRIVALS:
            raise ConfigError("--rate", f"{r:g} requests/s expects {r * window_s:.2g} arrivals in the {window_s:g} s "
                              f"measured window; at most {MAX_WINDOW_ARRIVALS:,} are sent")  # fmt: skip
    return rates


def open_load(rate: str | None, arrivals: Path | None, seed: int | None, warmup_s: float,
              window_s: float) -> OpenLoad | None:  # fmt: skip
    """The bench's open-loop load from its options, or None for the closed loop (neither option given)."""
    if rate is not None and arrivals is not None:
        raise ConfigError("--arrivals", "replays a trace; --rate draws Poisson arrivals: give one of them")
    if rates := rate_options(rate, seed, window_s):
        return OpenLoad(rates=rates, seed=0 if seed is None else seed)
    if arrivals is not None:
        return OpenLoad(trace=load_trace(arrivals, warmup_s, window_s))
    return None
