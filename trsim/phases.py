"""Time-varying workloads in the simulator: a run cut into phases, each overriding the router's P and C, the
closed loop's concurrency and the output lengths from its start; what each phase committed and the thresholds
in force at its end (as set, and as applied at the active count then).

A phase's router is a fresh instance of the same routing source with the phase's P and C (a Markov router keeps
no per-request state, so nothing in flight is lost); a closed loop grows to a higher concurrency at once and
shrinks as sessions end, none cut short.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import simpy

from trcore import PeerReq
from trsim.clock import TICKS_PER_S, to_ticks
from trsim.lengths import LengthDist
from trsim.routing import RouterConfig, build_programs
from trsim.workload import WorkloadConfig, WorkloadRunner

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Phase:
    """One span of a run; None keeps what was in force. ``thresholds`` (not in scenario files): the vector to
    apply at the phase's start, as an oracle that knows each phase's best vector would."""

    duration_s: float
    P: Matrix | None = None
    C: Matrix | None = None
    concurrency: int | None = None
    output_tokens: LengthDist | None = None
    thresholds: tuple[int, ...] | None = None


class PhasedWorkload(WorkloadRunner):
    """A workload whose config changes between phases (:meth:`retarget`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_live = 0  # closed-loop sessions started and not yet retired
        self._has_started = False

    def start(self) -> None:
        self._has_started = True
        super().start()

    def _start_session(self, index: int | None = None) -> None:
        if not self.is_exhausted:
            self.num_live += 1
        super()._start_session(index)

    def on_finish(self, message: PeerReq, now: float) -> None:
        session = self._sessions.get(message.request_id)
        is_last_turn = session is not None and session.turn + 1 >= self.config.turns
        if is_last_turn and self.config.arrival == "closed":
            self.num_live -= 1  # replaced below (which counts it again) unless the loop shrinks
            if self.num_live >= self.config.concurrency:
                self._sessions.pop(message.request_id)
                return
        super().on_finish(message, now)

    def retarget(self, config: WorkloadConfig) -> None:
        """Later requests follow ``config``; a closed loop starts sessions up to its concurrency now."""
        self.config = config
        if config.arrival == "closed" and self._has_started:
            for _ in range(config.concurrency - self.num_live):
                self._start_session()


class PhaseDriving:
    """Applies each phase at its start on a simulation and records each phase's figures at its end.

    ``sim`` is a ``trsim.driver.Simulation`` (its env, config, subservers, workload, committed count,
    ``apply_thresholds``, ``thresholds_in_force`` and ``thresholds_applied``)."""

    def __init__(self, sim: Any, phases: tuple[Phase, ...], on_done: Callable[[], None]) -> None:
        self.sim, self.phases, self.on_done = sim, phases, on_done
        self.records: list[dict[str, Any]] = []
        self._open: tuple[int, Phase, int, int] | None = None  # the phase under way: (index, phase, start, tokens)
        params = sim.config.router.params
        self._P: Matrix | None = _matrix(params.get("P"))
        self._C: Matrix | None = _matrix(params.get("C"))

    @property
    def total_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    def start(self) -> None:
        """Apply the first phase now (call before the workload starts) and schedule the others."""
        self._apply(0, self.phases[0])
        self.sim.env.process(self._run())

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.sim.env
        for k, phase in enumerate(self.phases):
            if k:
                self._apply(k, phase)
            start, committed = env.now, self.sim.committed
            self._open = (k, phase, start, committed)
            yield env.timeout(to_ticks(phase.duration_s))
            self._open = None
            self._close(k, phase, start, committed)
        self.on_done()

    def close_open(self) -> None:
        """Record the phase a token limit cut short (``cut_short``), so the phases' tokens add up to the run's."""
        if self._open is not None:
            self._close(*self._open)
            self.records[-1]["cut_short"] = True
            self._open = None

    def _apply(self, k: int, phase: Phase) -> None:
        sim = self.sim
        if phase.P is not None or phase.C is not None:
            self._P = phase.P if phase.P is not None else self._P
            self._C = phase.C if phase.C is not None else self._C
            params = dict(sim.config.router.params)
            params.update({key: [list(r) for r in m] for key, m in (("P", self._P), ("C", self._C)) if m is not None})
            router = RouterConfig(sim.config.router.program, params)
            rng = random.Random(sim.config.seed * 7919 + k)
            models = [sub.model for sub in sim.subservers]
            programs = build_programs(router, sim.config.num_models, rng, models)
            for sub, program in zip(sim.subservers, programs, strict=True):
                sub.program = program
        workload = sim.workload.config
        if phase.concurrency is not None:
            workload = replace(workload, concurrency=phase.concurrency)
        if phase.output_tokens is not None:
            workload = replace(workload, output_tokens=phase.output_tokens)
        if workload is not sim.workload.config:
            sim.workload.retarget(workload)
        if phase.thresholds is not None:
            sim.apply_thresholds(phase.thresholds)

    def _close(self, k: int, phase: Phase, start: int, committed: int) -> None:
        sim, workload = self.sim, self.sim.workload.config
        seconds = (sim.env.now - start) / TICKS_PER_S
        tokens = sim.committed - committed
        self.records.append(
            {
                "index": k,
                "start_s": start / TICKS_PER_S,
                "end_s": sim.env.now / TICKS_PER_S,
                "committed_tokens": tokens,
                "throughput_tok_s": tokens / seconds if seconds > 0 else 0.0,
                "thresholds": list(sim.thresholds_in_force()),  # as set (by the scenario, the controller)
                "applied": list(sim.thresholds_applied()),  # as run: capped by the active count and max batch
                "concurrency": workload.concurrency if workload.arrival == "closed" else None,  # open: no N
                "P": [list(r) for r in self._P] if self._P else None,
            }
        )


def _matrix(rows: Sequence[Sequence[float]] | None) -> Matrix | None:
    return None if rows is None else tuple(tuple(float(x) for x in row) for row in rows)
