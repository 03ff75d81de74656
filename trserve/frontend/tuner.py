"""``batching.thresholds: adaptive`` in the server: the core's controller (:mod:`trcore.adaptive`) fed by the
subservers' step reports, run off the hot path in the front end process.

Each step report adds its step time by batch size, every request's routing decision (``routes``: the model
that continues it; kept when its output grew; a finished request counts as going back to the entry model) and
the active count to the current span; every ``tick_s`` an asyncio task closes the span, hands it to the
controller and asks for a decision. A solve runs in a process of its own (one, started at the first solve), so
that its CPU (0.2-0.6 s at N = 64 on two models) never holds the interpreter lock the event loop serving requests
needs.
Solves are held to a CPU budget (``max_cpu_fraction`` of the time run, plus ``cpu_credit_s``); a tick over budget
decides on the last solve. A switch goes to every subserver in one :class:`Thresholds` message, applied at its
next launch; a worker that (re)connects is sent the vector in force. Every solve is logged with its inputs and
predicted gain; ``/metrics`` and ``/debug/state`` show what the controller sees.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from trcore.adaptive import AdaptiveConfig, AdaptiveController, Retune, SolveJob, solve
from trcore.adaptive_window import ObservationBuilder
from trserve.config import AdaptiveThresholdsConfig
from trserve.runtime.messages import StepReport, Thresholds

log = logging.getLogger(__name__)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Tuner:
    """The adaptive controller of one server. ``broadcast`` sends a message to every live subserver;
    ``num_active`` reads the front end's active count; ``clock`` is the monotonic clock (seconds). With replicas
    (``pipelines`` > 1) the window sees one pipeline's share of the active requests and the predicted throughput
    shown is the whole server's (``pipelines`` x one pipeline's)."""

    def __init__(
        self,
        cfg: AdaptiveThresholdsConfig,
        thresholds: Sequence[int],
        *,
        entry_model: int,
        max_batch: Sequence[int],
        model_names: Sequence[str],
        registry: CollectorRegistry,
        broadcast: Callable[[Any], None],
        num_active: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] = _stderr,
        pipelines: int = 1,
    ) -> None:
        self.controller = AdaptiveController(AdaptiveConfig(**cfg.core_knobs()), thresholds, max_batch=max_batch)
        self.cfg, self.entry_model, self.names = cfg, entry_model, list(model_names)
        self.broadcast, self.num_active, self.clock, self.say = broadcast, num_active, clock, say
        self.pipelines = pipelines
        self.started = clock()
        self.builder = ObservationBuilder(len(self.names), 0.0)
        self._tokens: deque[tuple[float, int]] = deque()  # (span end, tokens committed in it)
        self._span_tokens = 0
        self._task: asyncio.Task[None] | None = None
        #: CPU seconds spent by the controller: feeding the window on the event loop, solving in its process.
        self.cpu_s = 0.0
        self.num_deferred = 0  # solves the CPU budget put off
        self._pool: ProcessPoolExecutor | None = None
        self._gauges(registry)

    def _gauges(self, reg: CollectorRegistry) -> None:
        self.registry = reg
        self.g_thresholds = Gauge("tokenrouter_adaptive_thresholds", "Threshold in force", ["model"], registry=reg)
        self.g_P = Gauge("tokenrouter_adaptive_p", "Learned routing P[src][dst]", ["src", "dst"], registry=reg)
        self.g_C = Gauge("tokenrouter_adaptive_c", "Learned kept share C[src][dst]", ["src", "dst"], registry=reg)
        self.g_concurrency = Gauge(
            "tokenrouter_adaptive_concurrency", "Concurrency the window saw (a pipeline's)", registry=reg
        )
        self.g_predicted = Gauge(
            "tokenrouter_adaptive_predicted_tok_s", "Model throughput of the vector in force", registry=reg
        )
        self.g_measured = Gauge("tokenrouter_adaptive_measured_tok_s", "Committed tok/s over the window", registry=reg)
        self.c_switches = Counter("tokenrouter_adaptive_switches", "Threshold switches", registry=reg)
        self._show_thresholds()

    @property
    def thresholds(self) -> tuple[int, ...]:
        return self.controller.thresholds

    def now(self) -> float:
        return self.clock() - self.started

    # -- fed by the front end on every step report (cheap: counters only) --------------------------------------

    def on_step(self, report: StepReport) -> None:
        started = time.thread_time()
        self._record(report)
        self.cpu_s += time.thread_time() - started

    def _record(self, report: StepReport) -> None:
        b, model = self.builder, report.model
        b.set_active(self.num_active() / self.pipelines, self.now())
        if report.batch_size and report.step_s > 0:  # not a report of requests failed without a step (0 s)
            b.record_step(model, report.batch_size, report.step_s)
        grown = {rid for rid, _, tokens in report.tokens if tokens}
        for rid, dest, _, _ in report.routes:
            b.record_route(model, dest, rid in grown)
        for _ in report.finished:
            b.record_route(model, self.entry_model, True)
        self._span_tokens += sum(len(t) for _, _, t in report.tokens) + len(report.finished)

    # -- the decision loop ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.tick_s)
            try:
                await self.tick()
            except Exception:  # a failed solve must not stop the tuner
                log.exception("adaptive thresholds: decision failed")

    async def tick(self) -> Retune | None:
        """Close the span and decide, solving in the solver's process if the inputs moved and the CPU budget
        allows; a switch goes to every subserver."""
        now, started = self.now(), time.thread_time()
        self.builder.set_active(
            self.num_active() / self.pipelines, now
        )  # the count reports last gave may be stale (idle: no reports)
        self.controller.observe(self.builder.flush(now))
        self._tokens.append((now, self._span_tokens))
        self._span_tokens = 0
        job = self.controller.plan(now)
        self._trim_tokens(now)
        self.cpu_s += time.thread_time() - started
        if job is None:
            self._show(None)
            return None
        fresh = None
        if job.fresh and self.within_budget():
            try:
                fresh, cpu_s = await asyncio.get_running_loop().run_in_executor(self.pool(), timed_solve, job)
            except BrokenProcessPool:
                self._pool = None  # the solver process died (killed, out of memory): a fresh one at the next solve
                raise
            self.cpu_s += cpu_s
        elif job.fresh:
            self.num_deferred += 1
        retune = self.controller.conclude(self.now(), fresh)  # a switch counts from when it is applied
        self._show(retune)
        if retune is not None and retune.applied:
            self.broadcast(Thresholds(retune.new))
        return retune

    def _trim_tokens(self, now: float) -> None:
        """Keep the committed tokens of the spans the controller's window still holds: it forgets those older than
        ``window_s``, and all before a change in the traffic (then the measured rate must not count them)."""
        obs = self.controller.window.observations
        start = obs[0].start_s if obs else now
        while self._tokens and self._tokens[0][0] <= start + 1e-9:
            self._tokens.popleft()

    def within_budget(self) -> bool:
        """Whether a solve may start: CPU so far within ``max_cpu_fraction`` of the time run, plus the credit."""
        return self.cpu_s <= self.cfg.max_cpu_fraction * self.now() + self.cfg.cpu_credit_s

    def pool(self) -> ProcessPoolExecutor:
        """The solver's process (spawned: the front end runs threads, which a fork would copy mid-flight)."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def _show(self, retune: Retune | None) -> None:
        span = self.controller.window.span_s
        self.g_measured.set(sum(n for _, n in self._tokens) / span if span > 0 else 0.0)
        est = self.controller.last_estimate
        if est is None:  # the window is too thin to estimate (idle, or starting): no concurrency to show
            self.g_concurrency.set(float("nan"))
        else:
            self.g_concurrency.set(est.concurrency)
            for i, row in enumerate(est.P):
                for j, p in enumerate(row):
                    self.g_P.labels(self.names[i], self.names[j]).set(p)
                    self.g_C.labels(self.names[i], self.names[j]).set(est.routing.C[i][j])
        # The model's tok/s of the vector in force; none while there is no window (idle: beside a measured 0).
        predicted = self.controller.predicted_tok_s
        self.g_predicted.set(float("nan") if est is None or predicted is None else self.pipelines * predicted)
        if retune is None:
            return
        if retune.applied:
            self.c_switches.inc()
            self._show_thresholds()
        self.say(describe(retune))

    def _show_thresholds(self) -> None:
        for name, b in zip(self.names, self.thresholds, strict=True):
            self.g_thresholds.labels(name).set(b)

    def state(self) -> dict[str, Any]:
        """The controller's window and last decision (``/debug/state``), its clock (``now_s``: switches' times
        are on it) and the CPU seconds it has spent (``cpu_s``, over ``now_s`` of running)."""
        switches = [s.to_dict() for s in self.controller.switches[-20:]]
        return {**self.controller.state(), "switches": switches, "now_s": self.now(), "cpu_s": self.cpu_s,
                "num_deferred": self.num_deferred}  # fmt: skip


#: CPU seconds an ``auto`` solve may take exactly before it is redone sampled: exact solves near the ``auto``
#: limits took 7-22 s at N = 24-28 (chains of tens of thousands of states, solved for several vectors and tables),
#: holding the controller and its budget for minutes; sampled ones take 0.2-0.6 s.
EXACT_CPU_LIMIT_S = 2.0


class _OverCPU(Exception):
    """The solve ran past :data:`EXACT_CPU_LIMIT_S`."""


def _over_cpu(signum: int, frame: Any) -> None:
    raise _OverCPU


def timed_solve(job: SolveJob) -> tuple[Retune, float]:
    """:func:`trcore.adaptive.solve` and the CPU seconds it took (run in the solver's process, whose main thread
    may take the profiling timer); an ``auto`` solve past :data:`EXACT_CPU_LIMIT_S` of CPU is redone sampled."""
    started = time.process_time()
    if job.config.method != "auto":
        return solve(job), time.process_time() - started
    previous = signal.signal(signal.SIGPROF, _over_cpu)
    signal.setitimer(signal.ITIMER_PROF, EXACT_CPU_LIMIT_S)
    try:
        retune = solve(job)
    except _OverCPU:
        log.info("adaptive thresholds: exact solve over %.1f s of CPU at N=%d; sampling", EXACT_CPU_LIMIT_S,
                 job.inputs.concurrency)  # fmt: skip
        retune = solve(replace(job, config=replace(job.config, method="sampled")))
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    return retune, time.process_time() - started


def describe(retune: Retune) -> str:
    """One log line per solve: what it found, whether it switched, and the inputs."""
    inputs = retune.inputs
    verb = "switched" if retune.applied else f"kept ({retune.reason})"
    scales = ", ".join(f"{row[0] * 1000:.1f}-{row[-1] * 1000:.1f} ms" for row in inputs.latency_s)
    return (
        f"tokenrouter: adaptive thresholds at {retune.time_s:.1f} s: {list(retune.old)} -> {list(retune.new)} {verb}; "
        f"predicted {retune.predicted_gain:+.2%} ({retune.predicted_tok_s:.1f} vs {retune.current_tok_s:.1f} tok/s, "
        f"{retune.method}); inputs: N={inputs.concurrency}, P={[[round(p, 3) for p in r] for r in inputs.P]}, "
        f"C={[[round(c, 3) for c in r] for r in inputs.routing.C]}, steps {list(inputs.num_steps)} over "
        f"{inputs.span_s:.1f} s, step time {scales}"
    )
