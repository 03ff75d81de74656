"""What a simulation reports, mixed into :class:`trsim.driver.Simulation`: the run's :class:`SimResult` (with the
replicas', memory's, phases' and switches' extras), each finished request's first-token time, and the recorded
routing events (for traces and latency breakdowns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trcore import Request, RouteEvent
from trsim.clock import TICKS_PER_S
from trsim.metrics import SimResult

if TYPE_CHECKING:
    import simpy

    from trcore import Subserver
    from trcore.replicas import ReplicaTable
    from trsim.metrics import RunStats


class ResultReporting:
    """The run's results, from the state :class:`~trsim.driver.Simulation` keeps."""

    env: simpy.Environment
    subservers: list[Subserver]
    table: ReplicaTable
    stats: RunStats
    committed: int
    num_active: int
    kv: Any
    phasing: Any
    adaptive: Any
    _warmup: tuple[int, int] | None

    def _kv_summary(self, end: int) -> dict[str, Any]:
        raise NotImplementedError

    def route_events(self) -> list[RouteEvent]:
        """Every model's recorded routing events (empty without ``record_trace``)."""
        return [event for sub in self.subservers for event in sub.trace or ()]

    def _first_token_time(self, rid: str, batch: tuple[Request, ...], now: float) -> float:
        """The earliest first commit among the request's records (one per model it visited); asked once per
        request at its end rather than tracked every step."""
        records = [r for r in batch if r.spec.request_id == rid]
        records += [sub.requests[rid] for sub in self.subservers if rid in sub.requests]
        times = [r.first_token_time for r in records if r.first_token_time is not None]
        return min(times, default=now)

    def _result(self, wall_s: float) -> SimResult:
        end = self.env.now
        tokens0, tick0 = self._warmup or (self.committed, end)
        result = self.stats.summarize(
            committed=self.committed,
            measured_tokens=self.committed - tokens0,
            measured_s=(end - tick0) / TICKS_PER_S,
            simulated_s=end / TICKS_PER_S,
            wall_s=wall_s,
            num_unfinished=self.num_active + self.workload.num_held,
            ticks_per_s=TICKS_PER_S,
        )
        if self.table.has_replicas:  # steps per (model, replica), in process order
            steps = zip(self.table.procs, self.stats.proc_steps, strict=True)
            result.extra["replica_steps"] = [[m, r, n] for (m, r), n in steps]
        if self.kv is not None:
            result.extra["kv"] = self._kv_summary(end)
        if self.phasing is not None:
            self.phasing.close_open()
            result.extra["phases"] = self.phasing.records
        if self.adaptive is not None:
            result.extra["switches"] = self.adaptive.switch_records()
            result.extra["num_solves"] = self.adaptive.controller.num_solves
        return result
