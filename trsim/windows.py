"""Simulating measured open-loop windows: each window's own arrival times replayed (``WorkloadConfig(arrival=
"trace")``) over its warm-up and measured span, throughput over the measured span only, and the windows pooled as
a measurement pools them (throughput: the mean over windows; latencies over every window's finished requests).

A real open-loop run knows its arrival times before it starts (a seeded draw or a trace file); simulating those
very times, rather than a fresh draw at the nominal rate, takes the draw's sampling noise (about
``1 / sqrt(rate x window)`` in the offered load) out of the comparison.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trcore import ConfigError
from trsim import breakdown
from trsim.clock import TICKS_PER_S
from trsim.config import SimConfig
from trsim.driver import Simulation
from trsim.metrics import RunStats, SimResult
from trsim.workload import check_arrival_times


@dataclass(frozen=True)
class Windows:
    """Measured windows to simulate: each one's arrival times (seconds from its start; one may be empty; those at
    or after the window's end are dropped, as the real senders send none), run for ``warmup_s`` then
    ``measure_s``. Latencies cover the requests that finished by the window's end, or with ``in_window`` only
    those that finished inside the measured span (as the bench counts them). Each window runs once per
    ``pair_offsets`` entry (the workload's ``pair_offset``: another assignment of its lengths and traces to the
    same arrivals), every run pooled: the simulator's percentiles then rest on more than one draw of routes."""

    arrivals: tuple[tuple[float, ...], ...]
    warmup_s: float
    measure_s: float
    in_window: bool = False
    pair_offsets: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if not self.arrivals:
            raise ConfigError("windows.arrivals", "needs at least one window")
        if not self.warmup_s >= 0 or not self.measure_s > 0:
            raise ConfigError("windows", f"needs warmup_s >= 0 and measure_s > 0, got {self.warmup_s}, "
                              f"{self.measure_s}")  # fmt: skip
        checked = (check_arrival_times(t) if t else () for t in self.arrivals)
        # as the real senders do, none at or after the window's end (one there would start as the run stops)
        object.__setattr__(self, "arrivals", tuple(tuple(x for x in t if x < self.end_s) for t in checked))
        if not self.pair_offsets:
            raise ConfigError("windows.pair_offsets", "needs at least one offset")

    @property
    def end_s(self) -> float:
        """A window's length: warm-up and measured span."""
        return self.warmup_s + self.measure_s

    @property
    def finished_between(self) -> tuple[float, float]:
        """The span in which a request must finish for its latencies to count."""
        return (self.warmup_s if self.in_window else 0.0), self.end_s


def simulate_windows(config: SimConfig, windows: Windows, *, record_breakdown: bool = False) -> SimResult:
    """``config`` (its workload's lengths and sessions; its arrivals replaced by window k's times, its seed by
    ``seed + k``) run over every window (once per pair offset) and pooled: ``throughput_tok_s`` is the mean over
    the runs of the tokens committed in the measured span per second (``extra["windows_tok_s"]``: each run's,
    window-major); latencies, batch
    histograms and hand-offs cover every window; ``num_unfinished`` sums the requests still running at the
    windows' ends (``extra["backlog_at_end"]``: each run's). With ``record_breakdown``, ``extra["breakdown"]``
    is the per-request latency breakdown (``trsim.breakdown``) of the same requests; with KV memory,
    ``extra["kv"]`` lists each window's memory summary. A window without arrivals commits nothing."""
    parts: list[RunStats] = []
    results: list[SimResult] = []
    timings: list[breakdown.Breakdown] = []
    tputs, backlogs = [], []
    runs = [(k, times, offset) for k, times in enumerate(windows.arrivals) for offset in windows.pair_offsets]
    for k, times, offset in runs:
        if not times:
            tputs.append(0.0)
            backlogs.append(0)
            continue
        workload = replace(config.workload, arrival="trace", arrival_times_s=times, pair_offset=offset)
        sim = Simulation(replace(config, workload=workload, seed=config.seed + k), record_trace=record_breakdown)
        result = sim.run(time_s=windows.end_s, warmup_s=windows.warmup_s)
        parts.append(sim.stats)
        results.append(result)
        tputs.append(result.throughput_tok_s)
        backlogs.append(result.num_unfinished)
        if record_breakdown:
            timings += _breakdowns(sim, windows.finished_between)
    return _pooled(config, windows, parts, results, tputs, backlogs, timings if record_breakdown else None)


def _breakdowns(sim: Simulation, between: tuple[float, float]) -> list[breakdown.Breakdown]:
    """Per-request breakdowns of the run's requests that finished in ``between``."""
    assert sim.request_times is not None
    times = {rid: t for rid, t in sim.request_times.items() if between[0] <= t[2] <= between[1]}
    return breakdown.breakdowns(sim.route_events(), times, sim.config.num_models)


def _pooled(
    config: SimConfig,
    windows: Windows,
    parts: Sequence[RunStats],
    results: Sequence[SimResult],
    tputs: list[float],
    backlogs: list[int],
    timings: list[breakdown.Breakdown] | None,
) -> SimResult:
    """One result for every window (see :func:`simulate_windows`)."""
    n = config.num_models
    empty = RunStats(n, sum(config.replicas or (1,) * n))
    stats = RunStats.pooled(list(parts) or [empty], windows.finished_between)
    result = stats.summarize(
        committed=sum(r.committed_tokens for r in results),
        measured_tokens=0,
        measured_s=0.0,
        simulated_s=len(tputs) * windows.end_s,
        wall_s=sum(r.wall_s for r in results),
        num_unfinished=sum(backlogs),
        ticks_per_s=TICKS_PER_S,
    )
    extra: dict[str, Any] = {"windows_tok_s": tputs, "backlog_at_end": backlogs}
    if timings is not None:
        extra["breakdown"] = breakdown.summarize(timings, n)
    if any("kv" in r.extra for r in results):
        extra["kv"] = [r.extra.get("kv") for r in results]
    return replace(result, throughput_tok_s=statistics.fmean(tputs), extra=extra)
