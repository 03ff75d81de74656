"""The simulator's load for an open-loop (rate) cell: the arrival times the real side drew for the scored repeats
(repeat k: seed ``arrival_seed + k``, :func:`trserve.crossval.open_client.draw_arrivals`), each replayed over the
cell's warm-up and window (``trsim.windows``), with throughput counted over the window only, as the real side
counts it. As the server, the simulation admits at most ``server.max_active_requests`` at once; later arrivals
wait for a slot, their latencies counted from arrival (``trsim.workload.WorkloadConfig.max_active``).

A real window of ``measure_s`` seconds holds about ``rate x measure_s`` arrivals, off by about
``1 / sqrt(rate x measure_s)``; replaying the very times it drew takes that sampling noise out of the throughput
comparison. The times are an input known before the run (a seeded draw), so the prediction stays out of sample:
routing, traces and lengths still come from the input repeat. Which of those traces meets which arrival is itself a
draw: at a few requests a second a window's p99 rests on its one or two slowest requests, so one assignment leaves
the simulator's tail a draw of its own. The simulator runs :data:`TRACE_ASSIGNMENTS` assignments (the traces
rotated by offsets spread over them) and pools them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trcore.errors import ConfigError
from trserve.crossval.open_client import draw_arrivals
from trserve.crossval.plan import CrossvalPlan, Rate
from trsim.windows import Windows

#: What a rate cell records as ``sim_arrivals``.
SIM_ARRIVALS = "the scored repeat's"
#: Assignments of the input traces to the scored arrivals a rate cell's simulation pools.
TRACE_ASSIGNMENTS = 8


@dataclass(frozen=True)
class Replay:
    """A rate cell's load as the simulator takes it: the rate, the seeds of the scored repeats' arrival draws, the
    window every draw spans (``warmup_s`` then ``measure_s``), the server's admission limit (None: none) and the
    client's send lag (the input repeat's median at this rate: how late its client sent after each arrival) and
    how many assignments of the traces to the arrivals it pools."""

    rate: Rate
    seeds: tuple[int, ...]
    warmup_s: float
    measure_s: float
    max_active: int | None = None
    send_lag_s: float = 0.0
    assignments: int = TRACE_ASSIGNMENTS

    def windows(self, num_traces: int) -> Windows:
        """Each scored repeat's arrival times over its warm-up and window (latencies: every request finished by
        the cell's end, as the real side records them), once per assignment of ``num_traces`` traces (offsets
        spread evenly over them)."""
        draws = (draw_arrivals(self.rate.rps, self.warmup_s, self.measure_s, seed).times_s for seed in self.seeds)
        offsets = dict.fromkeys(r * num_traces // self.assignments for r in range(self.assignments))
        return Windows(tuple(draws), self.warmup_s, self.measure_s, pair_offsets=tuple(offsets))

    def to_dict(self) -> dict[str, Any]:
        """What a rate cell records of the simulator's arrivals."""
        return {
            "sim_arrivals": SIM_ARRIVALS,
            "sim_arrival_seeds": list(self.seeds),
            "sim_window_s": [self.warmup_s, self.warmup_s + self.measure_s],
            "sim_max_active": self.max_active,
            "sim_send_lag_s": self.send_lag_s,
            "sim_trace_assignments": self.assignments,
        }


def scored_replay(plan: CrossvalPlan, rate: Rate, max_active: int | None = None, send_lag_s: float = 0.0) -> Replay:
    """The arrivals of ``plan``'s scored repeats at ``rate``: repeats 1.. with two or more repeats, else repeat 0
    (the run is then in sample anyway); ``max_active``: the server's admission limit; ``send_lag_s``: the
    client's."""
    seeds = tuple(plan.arrival_seed + k for k in (range(1, plan.repeats) if plan.repeats >= 2 else range(1)))
    return Replay(rate, seeds, plan.warmup_s, plan.measure_s, max_active, send_lag_s)


def replay_of(cell: Mapping[str, Any]) -> Replay:
    """The replay a written rate cell records (:meth:`Replay.to_dict`)."""
    if "sim_arrival_seeds" not in cell:
        raise ConfigError("cells", "a rate cell without sim_arrival_seeds (written before the simulator replayed "
                          "the scored arrivals): run tokenrouter crossval again")  # fmt: skip
    warmup_s, end_s = cell["sim_window_s"]
    seeds = tuple(cell["sim_arrival_seeds"])
    lag = cell.get("sim_send_lag_s", 0.0)
    assignments = cell.get("sim_trace_assignments", 1)  # runs before the assignments pooled one
    return Replay(Rate(cell["rate_rps"]), seeds, warmup_s, end_s - warmup_s, cell.get("sim_max_active"), lag,
                  assignments)  # fmt: skip
