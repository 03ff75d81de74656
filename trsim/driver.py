"""The SimPy driver: one process per model subserver, driving the trcore core through receive / launch /
complete. SimPy replaces the engine and the clock; everything else is the core the real server runs.

Time is integer nanosecond ticks. At an instant where several things happen, every step completion and delivery
is processed before any model decides to launch (lower priority), as the throughput model orders events.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Generator
from operator import attrgetter
from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, Event, Timeout

from trcore import CLIENT, Batch, ConfigError, InfeasibleError, PeerReq, Request, Subserver
from trcore.replicas import ReplicaTable
from trsim.adaptive import AdaptiveDriving
from trsim.baselines import PerTokenLatency
from trsim.chrome import StepRecord
from trsim.clock import LATE, MAX_SPAN_S, TICKS_PER_S, cost_ticks, fire, to_ticks
from trsim.config import SimConfig
from trsim.driver_memory import MemoryDriving
from trsim.driver_results import ResultReporting
from trsim.driver_thresholds import ThresholdDriving
from trsim.kv import KVRecorder
from trsim.latency import PrefixCachedModel
from trsim.metrics import RunStats, SimResult
from trsim.phases import PhaseDriving, PhasedWorkload
from trsim.routing import build_programs
from trsim.signals import StepSynthesizer
from trsim.workload import PREFIX_KEY, WorkloadRunner

_token_ids = attrgetter("token_ids")


class Simulation(MemoryDriving, ThresholdDriving, ResultReporting):
    """One simulated run of a configured system. Build, then :meth:`run` once.

    With replicas (``config.replicas``) every (model, replica) is a subserver of its own (``subservers[p]``, process
    ``p`` of :class:`~trcore.replicas.ReplicaTable`), and a new request is pinned to one replica of every model by
    the server's rule (:meth:`~trcore.replicas.ReplicaTable.pin` on queue plus pinned requests); a replica's
    threshold table reads the requests pinned to it."""

    def __init__(self, config: SimConfig, *, record_trace: bool = False, chrome_trace: bool = False) -> None:
        config.check_feasible()
        self.config = config
        self.env = simpy.Environment()
        rng = random.Random(config.seed)
        n = config.num_models
        self.table = table = ReplicaTable(config.replicas or (1,) * n)
        models = [m for m, _ in table.procs]
        programs = build_programs(config.router, n, random.Random(rng.getrandbits(64)), models)
        needed = frozenset().union(*(p.required_signals for p in programs))
        self.synth = StepSynthesizer(needed, config.signals, random.Random(rng.getrandbits(64)))
        kv, traced = config.kv, record_trace or config.adaptive is not None  # the controller reads routes
        self.subservers = [
            Subserver(p, config.policies[p.model], record_trace=traced, memory=self._memory(p.model) if kv else None)
            for p in programs
        ]
        self.kv = KVRecorder([s.memory for s in self.subservers if s.memory]) if kv else None
        self.latency = list(config.latency)
        self.cooldown_ticks = 0
        #: Per receiving model: ticks a hand-off travels; per process: ticks its model's loop adds to each step.
        self.transfer_ticks = [cost_ticks(config.transfer_delay(m)) for m in range(n)]
        self.submit_ticks = self.transfer_ticks[config.entry_model] + cost_ticks(config.send_lag_s)
        self.overhead_ticks = [cost_ticks(config.host_overhead(m)) for m, _ in table.procs]
        self.per_request_ticks = [cost_ticks(config.host_overhead_per_request(m)) for m, _ in table.procs]
        if config.per_token is not None:
            pt = config.per_token
            self.latency = [PerTokenLatency(lat, m, pt) for m, lat in enumerate(self.latency)]
            self.cooldown_ticks = cost_ticks(pt.client_rtt_s)
            self.transfer_ticks = [max(t, self.cooldown_ticks) for t in self.transfer_ticks]
        if config.workload.turns > 1 and config.workload.prefix_cache:
            self.latency = [PrefixCachedModel(lat, m, PREFIX_KEY) for m, lat in enumerate(self.latency)]
        self.stats = RunStats(n, table.num_procs)
        runner = PhasedWorkload if config.phases else WorkloadRunner
        self.workload = runner(config.workload, self, n, random.Random(rng.getrandbits(64)))
        self.phasing = PhaseDriving(self, config.phases, self._stop) if config.phases else None
        self.adaptive = AdaptiveDriving(self, config.adaptive, record_trace) if config.adaptive else None
        self.steps: list[StepRecord] | None = [] if chrome_trace else None
        #: With ``record_trace``: per finished request (submitted, first token, finish), for latency breakdowns.
        self.request_times: dict[str, tuple[float, float, float]] | None = {} if record_trace else None
        self.committed = self.num_active = 0
        self.pinned = [0] * table.num_procs
        self._pins: dict[str, tuple[int, ...]] = {}
        self._arrivals: dict[str, float] = {}
        self._wake: list[Event | None] = [None] * table.num_procs
        self._target_tokens: int | None = None
        self._warmup: tuple[int, int] | None = None  # (tokens, tick) when warm-up ended
        self._warmup_tokens = 0
        self._holds_to_limit = False  # replayed arrivals with a time limit: the run lasts it
        self._stopped = False
        for p in range(table.num_procs):
            self.env.process(self._model_process(p))

    # -- the driver interface the workload uses -------------------------------------------------------
    def now_s(self) -> float:
        return self.env.now / TICKS_PER_S

    def submit(self, message: PeerReq, now: float, arrived: float | None = None) -> None:
        """A client request leaves for the entry model (send lag + transfer delay away); latencies from ``arrived``."""
        self._arrivals[message.request_id] = now if arrived is None else arrived
        table, entry = self.table, self.config.entry_model
        if table.has_replicas:
            pins = table.pin([sub.num_ready + n for sub, n in zip(self.subservers, self.pinned, strict=True)])
            self._pins[message.request_id] = pins
            entry = table.proc(entry, pins[entry])
        self._set_active(self.num_active + 1, message.request_id)
        self._deliver_later(entry, message, self.submit_ticks)

    # -- running --------------------------------------------------------------------------------------
    def run(
        self, tokens: int | None = None, time_s: float | None = None, warmup_tokens: int = 0, warmup_s: float = 0.0
    ) -> SimResult:
        """Run until ``tokens`` committed tokens, ``time_s`` simulated seconds, or the workload is done (replayed
        arrival times with a time limit: the run lasts ``time_s``, idle after its last request if need be). Throughput
        counts tokens after the first ``warmup_tokens``, or from ``warmup_s`` on (a real run's measured window)."""
        if tokens is None and time_s is None and not self.config.workload.is_finite and not self.phasing:
            raise ConfigError("run", "give a token or time limit, or a workload with num_sessions")
        for name, value, most in (("tokens", tokens, math.inf), ("time_s", time_s, MAX_SPAN_S)):
            if value is not None and not 0 < value <= most:
                raise ConfigError(name, f"must be > 0 and at most {most:g}, got {value}")
        if warmup_tokens < 0 or (tokens is not None and warmup_tokens >= tokens):
            raise ConfigError("warmup_tokens", "must be >= 0 and below the token limit")
        self._check_warmup_s(warmup_s, warmup_tokens, time_s)
        self._target_tokens, self._warmup_tokens = tokens, warmup_tokens
        if warmup_s > 0:  # the window opens at that instant, before any step that ends then
            self.env.timeout(to_ticks(warmup_s)).callbacks.append(lambda _e: self._open_window())
        elif warmup_tokens == 0:
            self._warmup = (0, 0)
        if time_s is not None:
            self._holds_to_limit = self.config.workload.arrival == "trace"
            self.env.timeout(to_ticks(time_s)).callbacks.append(lambda _e: self._stop())
        started = time.perf_counter()
        for driving in filter(None, (self.phasing, self.adaptive)):
            driving.start()
        self.workload.start()
        try:
            while True:
                self.env.step()
        except StopSimulation:
            pass
        except EmptySchedule:
            self._check_drained()
        self._check_servable()
        return self._result(time.perf_counter() - started)

    @staticmethod
    def _check_warmup_s(warmup_s: float, warmup_tokens: int, time_s: float | None) -> None:
        if not (math.isfinite(warmup_s) and warmup_s >= 0) or (time_s is not None and warmup_s >= time_s):
            raise ConfigError("warmup_s", f"must be >= 0 and below the time limit, got {warmup_s}")
        if warmup_s > 0 and warmup_tokens:
            raise ConfigError("warmup_s", "give warmup_tokens or warmup_s, not both")

    def _open_window(self) -> None:
        self._warmup = (self.committed, self.env.now)

    def _stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            event = Event(self.env)
            event.callbacks.append(StopSimulation.callback)
            fire(self.env, event, NORMAL)

    def _check_drained(self) -> None:
        if self.num_active:
            waiting = {m: s.num_ready for m, s in enumerate(self.subservers) if s.num_ready}
            raise self._memory_deadlock(waiting) or InfeasibleError("thresholds", f"the simulation deadlocked: "
                f"{self.num_active} active requests, ready per model {waiting}, thresholds "
                f"{list(self.config.thresholds)} never reached (lower them or set max_wait_ms)")  # fmt: skip

    # -- one model ------------------------------------------------------------------------------------
    def _model_process(self, p: int) -> Generator[Event, Any, None]:
        env, sub = self.env, self.subservers[p]
        latency = self.latency[sub.model]
        while True:
            batch = sub.launch(env.now / TICKS_PER_S)
            failed = self._settle_memory(sub) if self.kv is not None else 0
            if batch is None:
                if failed and sub.num_ready and not self._stopped:  # the failed ones' successors came in meanwhile
                    continue
                yield self._idle(p)
                continue
            launched = env.now
            ticks = round(latency(batch) * TICKS_PER_S) or 1
            yield Timeout(env, ticks)
            self.stats.proc_steps[p] += 1
            self._complete(p, batch, launched, ticks)  # the step's results are out; the loop is busy
            hold = self.cooldown_ticks + self.overhead_ticks[p] + self.per_request_ticks[p] * batch.size
            if hold:
                yield Timeout(env, hold)
            if not self.cooldown_ticks and env.peek() == env.now:  # more happens now: decide to launch after it
                yield fire(env, Event(env), LATE)

    def _complete(self, p: int, batch: Batch, launched: int, ticks: int) -> None:
        """Process ``p`` (model ``batch.model``) finished a step."""
        now, m = self.env.now / TICKS_PER_S, batch.model
        handoffs = self.subservers[p].complete(batch, self.synth(batch), now)
        requests = batch.requests
        committed = sum(map(len, map(_token_ids, requests))) - sum(batch.context_lens)
        stats = self.stats
        stats.steps[m] += 1
        stats.request_steps[m] += len(requests)
        stats.busy_ticks[m] += ticks
        stats.histograms[m][len(requests)] += 1
        if self.steps is not None:
            self.steps.append(StepRecord(m, launched, ticks, len(requests), sum(batch.num_new_tokens), committed))
        self._count(committed)
        if self.adaptive is not None:
            self.adaptive.on_step(p, batch, ticks, handoffs)
        pins = self._pins if self.table.has_replicas else None
        for dest, message in handoffs:
            if dest == CLIENT:
                self._finish(message, now, requests)
                continue
            delay = self.transfer_ticks[dest]
            if pins is not None:  # the request's pinned replica of ``dest``
                dest = self.table.proc(dest, pins[message.request_id][dest])
            if delay:
                stats.handoffs += not message.is_finished
                self._deliver_later(dest, message, delay)
            elif message.is_finished:  # a release: frees the request's state on a model that holds it
                self.subservers[dest].receive(message, now)
            else:
                stats.handoffs += 1
                self.subservers[dest].receive(message, now)
                if self._wake[dest] is not None:
                    self._wake_model(dest)
        if pins is not None:  # the releases above needed them
            for message in (m for d, m in handoffs if d == CLIENT):
                pins.pop(message.request_id, None)
        if self.kv is not None:
            self.kv.observe(self.env.now)

    def _count(self, committed: int) -> None:
        self.committed += committed
        if self._warmup is None and self._warmup_tokens and self.committed >= self._warmup_tokens:
            self._warmup = (self.committed, self.env.now)
        if self._target_tokens is not None and self.committed >= self._target_tokens:
            self._stop()

    def _deliver_later(self, dest: int, message: PeerReq, ticks: int) -> None:
        if not ticks:
            return self._deliver(dest, message)
        Timeout(self.env, ticks).callbacks.append(lambda _e: self._deliver(dest, message))

    def _deliver(self, dest: int, message: PeerReq) -> None:
        self.subservers[dest].receive(message, self.env.now / TICKS_PER_S)
        if not message.is_finished:
            self._wake_model(dest)
        elif self.kv is not None:  # a release frees blocks
            self.kv.observe(self.env.now)

    def _finish(self, message: PeerReq, now: float, batch: tuple[Request, ...]) -> None:
        rid = message.request_id
        arrival = self._arrivals.pop(rid)
        delivery = self.config.delivery_delay_s
        first, done = self._first_token_time(rid, batch, now) + delivery, now + delivery
        self.stats.finished.append((arrival, first, done, len(message.token_ids)))
        if self.request_times is not None:
            self.request_times[rid] = (arrival, first, done)
        self._end(message, now)

    def _end(self, message: PeerReq, now: float) -> None:
        """The request left the system (finished or failed): the client's next move."""
        rid = message.request_id
        self.synth.release(rid)
        self._set_active(self.num_active - 1, rid)
        self.workload.on_finish(message, now)
        if self.workload.is_exhausted and self.num_active == 0 and not self._holds_to_limit:
            self._stop()

    def _idle(self, m: int) -> Event:
        event = Event(self.env)
        self._wake[m] = event
        deadline = self.subservers[m].next_deadline()
        if deadline is not None:
            at = max(math.ceil(deadline * TICKS_PER_S), self.env.now + 1)
            timer = Timeout(self.env, at - self.env.now)
            timer.callbacks.append(lambda _e: self._wake_model(m) if self._wake[m] is event else None)
        return event

    def _wake_model(self, m: int) -> None:
        event = self._wake[m]
        if event is not None:
            self._wake[m] = None
            fire(self.env, event, LATE)


def simulate(
    config: SimConfig, tokens: int | None = None, time_s: float | None = None, warmup_tokens: int = 0, **options: bool
) -> SimResult:
    """Build and run one simulation (``options``: ``record_trace``, ``chrome_trace``)."""
    return Simulation(config, **options).run(tokens, time_s, warmup_tokens)
