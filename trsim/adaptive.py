"""``--thresholds adaptive`` in the simulator: the core's controller (``trcore.adaptive``) driven by the
simulated clock. Every step feeds the window (batch size, step time, each request's routing decision); every
``tick_s`` the span is handed to the controller and a decision asked for; a switch reaches every subserver's
policy ``solve_delay_s`` later, so it takes effect at each model's next launch (a step boundary)."""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from trcore import CLIENT, Batch, ConfigError, PeerReq
from trcore.adaptive import AdaptiveConfig, AdaptiveController, Retune, in_force
from trcore.adaptive_window import MAX_TICK_S, MAX_WINDOW_SPANS, ObservationBuilder
from trsim.clock import MAX_SPAN_S, TICKS_PER_S, to_ticks

#: The shortest time between decisions (a tick of nanoseconds would decide a billion times a simulated second).
MIN_TICK_S = 1e-3
#: Batch sizes the base latency tables cover (larger batches use the last entry).
BASE_TABLE_SIZE = 256


@dataclass(frozen=True)
class AdaptiveSimConfig:
    """The controller's knobs, the simulated time between decisions, and how long a solve takes (simulated
    seconds between a decision and its vector in force; 0: at once). ``context_tokens``: per request, where
    the latency models are tabulated for the controller's base tables."""

    controller: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    tick_s: float = 1.0
    solve_delay_s: float = 0.0
    context_tokens: int = 256

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tick_s) and MIN_TICK_S <= self.tick_s <= MAX_TICK_S):
            raise ConfigError("adaptive.tick_s", f"must be in [{MIN_TICK_S}, {MAX_TICK_S:g}] s, got {self.tick_s}")
        if self.tick_s < self.controller.window_s / MAX_WINDOW_SPANS:  # a run of ticks costs ~(window_s / tick_s)^2
            raise ConfigError("adaptive.tick_s", f"must be >= window_s / {MAX_WINDOW_SPANS} "
                              f"({self.controller.window_s / MAX_WINDOW_SPANS:g} s), got {self.tick_s:g}")  # fmt: skip
        if not (math.isfinite(self.solve_delay_s) and 0 <= self.solve_delay_s <= MAX_SPAN_S):
            raise ConfigError("adaptive.solve_delay_s", f"must be in [0, {MAX_SPAN_S:g}] s, got {self.solve_delay_s}")
        if self.context_tokens < 0:
            raise ConfigError("adaptive.context_tokens", f"must be >= 0, got {self.context_tokens}")


class AdaptiveDriving:
    """Feeds a simulation's steps to an :class:`~trcore.adaptive.AdaptiveController` and applies its switches.

    ``sim`` is a ``trsim.driver.Simulation`` (its env, config, latency models, subservers with route traces on,
    and ``apply_thresholds``)."""

    def __init__(self, sim: Any, config: AdaptiveSimConfig, keep_traces: bool) -> None:
        self.sim, self.config, self.keep_traces = sim, config, keep_traces
        caps = [p.max_batch for p in sim.config.policies]
        ctx = config.context_tokens
        base = [
            [lat.predict(b, b * ctx, 0) for b in range(1, min(cap, BASE_TABLE_SIZE) + 1)]
            for lat, cap in zip(sim.latency, caps, strict=True)
        ]
        self.controller = AdaptiveController(
            config.controller, sim.config.thresholds, base_latency_s=base, max_batch=caps
        )
        self.builder = ObservationBuilder(sim.config.num_models, 0.0)
        self._seen = [0] * len(sim.subservers)

    @property
    def switches(self) -> list[Retune]:
        return self.controller.switches

    def start(self) -> None:
        self.sim.env.process(self._loop())

    def on_step(self, p: int, batch: Batch, ticks: int, handoffs: Sequence[tuple[int, PeerReq]]) -> None:
        """Process ``p`` completed ``batch`` in ``ticks``: its step time and every request's routing decision
        (a finished request counts as going to the entry model, as a closed loop refills it there)."""
        builder, model = self.builder, batch.model
        builder.record_step(model, batch.size, ticks / TICKS_PER_S)
        trace = self.sim.subservers[p].trace
        finished = {m.request_id for d, m in handoffs if d == CLIENT}
        entry = self.sim.config.entry_model
        for event in trace[self._seen[p] :]:
            dest = entry if event.request_id in finished else event.destination
            builder.record_route(model, dest, event.kept)
        if self.keep_traces:
            self._seen[p] = len(trace)
        else:
            trace.clear()

    def set_active(self, count: float, now: float) -> None:
        self.builder.set_active(count, now)

    def _loop(self) -> Generator[simpy.Event, Any, None]:
        env, tick = self.sim.env, to_ticks(self.config.tick_s)
        while True:
            yield env.timeout(tick)
            now = env.now / TICKS_PER_S
            self.controller.observe(self.builder.flush(now))
            retune = self.controller.decide(now)
            if retune is not None and retune.applied:
                self._apply_later(retune.new)

    def _apply_later(self, thresholds: tuple[int, ...]) -> None:
        if self.config.solve_delay_s <= 0:
            self.sim.apply_thresholds(thresholds)
            return
        timer = self.sim.env.timeout(to_ticks(self.config.solve_delay_s))
        timer.callbacks.append(lambda _e: self.sim.apply_thresholds(thresholds))

    def switch_records(self) -> list[dict[str, Any]]:
        """Every switch: time, old and new vector, predicted gain (and the inputs it was solved on)."""
        return [s.to_dict() for s in self.controller.switches]


def phase_models(config: Any, phases: Sequence[Any], knobs: AdaptiveConfig) -> list[tuple[Any, int]]:
    """Per phase of ``config`` (a ``SimConfig`` with a ``markov``-like router), the throughput model of the phase's
    P, C and concurrency on the config's latencies (at 256 context tokens a request), with the controller's
    method's seed and quantum, and that concurrency: the calibrated inputs an offline ``auto`` would solve on."""
    from trcore.throughput import SamplingConfig, ThroughputModel

    P, C, n = config.router.params["P"], config.router.params["C"], config.workload.concurrency
    caps = [p.max_batch for p in config.policies]
    out = []
    for phase in phases:
        P = phase.P if phase.P is not None else P
        C = phase.C if phase.C is not None else C
        n = phase.concurrency if phase.concurrency is not None else n
        tables = [
            [lat.predict(b, b * 256, 0) for b in range(1, min(cap, n) + 1)]
            for lat, cap in zip(config.latency, caps, strict=True)
        ]
        quantum = min(min(t) for t in tables) * knobs.quantum_fraction
        sampling = SamplingConfig(seed=knobs.seed)
        out.append((ThroughputModel(P, C, tables, quantum_s=quantum, max_batch=caps, sampling=sampling), n))
    return out


def oracle_thresholds(config: Any, phases: Sequence[Any], knobs: AdaptiveConfig) -> list[tuple[int, ...]]:
    """Per phase, the vector the throughput model's ``optimize`` picks on :func:`phase_models`' inputs, with the
    controller's method and ``min_gain``: what an oracle that knows each phase would apply at its start."""
    return [_optimum(model, n, knobs) for model, n in phase_models(config, phases, knobs)]


def _optimum(model: Any, n: int, knobs: AdaptiveConfig) -> tuple[int, ...]:
    return tuple(model.optimize(n, min_gain=knobs.min_gain, method=knobs.method).thresholds)


def predicted_over_oracle(
    config: Any, phases: Sequence[Any], knobs: AdaptiveConfig, vectors: Sequence[Sequence[int]]
) -> list[float]:
    """Per phase, the throughput model's tok/s for ``vectors[k]`` over that for the phase's oracle vector, on the
    phase's calibrated inputs (1.0: as good as what offline ``auto`` picks). A vector that does not fit the phase's
    concurrency (a phase ending at N = 8 with the (1, 12) learnt at N = 64) is evaluated as the policies run it
    there: each threshold clamped to stay feasible (:func:`trcore.adaptive.in_force`, here (1, 8))."""
    out = []
    for (model, n), vector in zip(phase_models(config, phases, knobs), vectors, strict=True):
        best, vector = _optimum(model, n, knobs), in_force(vector, n)
        if vector == best:
            out.append(1.0)
            continue
        tok_s = [model.solve(n, b, method=knobs.method).throughput_tok_s for b in (vector, best)]
        out.append(tok_s[0] / tok_s[1])
    return out
