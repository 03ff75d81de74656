"""Prometheus metrics of one server, in a registry of its own (no process-global collectors)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from trserve.runtime.messages import State, StepReport
from trserve.runtime.reports import MEMORY_EVENTS

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
STEP_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
#: How much longer than emulated an emulated step took (seconds).
EMULATION_ERROR_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    """Per-model step metrics (fed by subserver step reports) and request-level metrics of the front end.

    The ``model`` label names a subserver process: the model's name, or with replicas ``replica_names[m][r]``
    (e.g. ``small-r1``, :meth:`trserve.model_config.ModelConfig.process_name`)."""

    def __init__(self, model_names: list[str], replica_names: list[list[str]] | None = None) -> None:
        self.model_names = model_names
        self.replica_names = replica_names or [[name] for name in model_names]
        self.registry = CollectorRegistry()
        reg = self.registry
        self.batch_size = Histogram(
            "tokenrouter_batch_size", "Requests per engine step", ["model"], buckets=BATCH_BUCKETS, registry=reg
        )
        self.step_seconds = Histogram(
            "tokenrouter_step_seconds", "Engine step latency", ["model"], buckets=STEP_BUCKETS, registry=reg
        )
        self.queue_length = Gauge(
            "tokenrouter_queue_length", "Requests ready and waiting for a step", ["model"], registry=reg
        )
        self.resident = Gauge(
            "tokenrouter_resident_requests",
            "Requests resident on a model (ready, running or pending)",
            ["model"],
            registry=reg,
        )
        self.kv_usage = Gauge("tokenrouter_kv_usage", "Fraction of KV cache blocks in use", ["model"], registry=reg)
        self.kv_blocks = Gauge(
            "tokenrouter_kv_blocks", "KV blocks by the core's accounting: total, used, parked, free",
            ["model", "kind"], registry=reg,
        )  # fmt: skip
        self.kv_events = Counter(
            "tokenrouter_kv_events",
            "Since the server started: spilled sessions, preempted requests, recomputed tokens, admission waits",
            ["model", "event"], registry=reg,
        )  # fmt: skip
        #: Each subserver's own count at its last report: its counters restart with the process, this one does not.
        self._kv_events_seen: dict[tuple[str, str], int] = {}
        self._kv_pids: dict[str, int] = {}  #: the process whose counts ``_kv_events_seen`` holds, per model
        self._kv_totals: dict[str, int] = {}  #: blocks of each model whose accounting was reported
        self.kv_waiting = Gauge(
            "tokenrouter_kv_waiting_admission", "New requests the model's core keeps waiting for KV now",
            ["model"], registry=reg,
        )  # fmt: skip
        self.handoffs = Counter(
            "tokenrouter_handoffs", "Requests handed to another model after a step", ["model"], registry=reg
        )
        self.tokens = Counter(
            "tokenrouter_tokens", "Output tokens committed by a model's steps", ["model"], registry=reg
        )
        self.finished = Counter(
            "tokenrouter_finished", "Requests whose last token a model's step committed", ["model"], registry=reg
        )
        self.input_tokens = Counter(
            "tokenrouter_input_tokens", "Tokens fed to a model (prefill and hand-off appends)", ["model"], registry=reg
        )
        self.steps = Counter("tokenrouter_steps", "Engine steps", ["model"], registry=reg)
        self.emulated_seconds = Counter(
            "tokenrouter_emulated_step_seconds", "Emulated engines: step latency given", ["model"], registry=reg
        )
        self.emulation_error = Histogram(
            "tokenrouter_emulated_step_error_seconds",
            "Emulated engines: measured step time minus the emulated latency",
            ["model"],
            buckets=EMULATION_ERROR_BUCKETS,
            registry=reg,
        )
        self.host_gap = Histogram(
            "tokenrouter_host_gap_seconds",
            "Time the loop spent between the end of a step and the start of the next while requests were ready",
            ["model"],
            buckets=EMULATION_ERROR_BUCKETS,
            registry=reg,
        )
        self.emulated_wait_cpu = Counter(
            "tokenrouter_emulated_wait_cpu_seconds", "Emulated engines: CPU of the waits", ["model"], registry=reg
        )
        self.transit_seconds = Counter(
            "tokenrouter_handoff_transit_seconds",
            "Hand-off messages: seconds from their sending (or the end of the receiver's step then in progress) to the"
            " receiver's loop taking them, summed",
            ["model"],
            registry=reg,
        )
        self.handoffs_received = Counter(
            "tokenrouter_handoffs_received",
            "Hand-off messages received (one per sender's step)",
            ["model"],
            registry=reg,
        )
        self.handoffs_late = Counter(
            "tokenrouter_handoffs_late",
            "Hand-off messages that missed a launch (the receiver stepped after they were sent, without them)",
            ["model"],
            registry=reg,
        )
        self.up = Gauge("tokenrouter_model_up", "1 while a model's process serves", ["model"], registry=reg)
        self.restarts = Counter("tokenrouter_model_restarts", "Subserver restarts", ["model"], registry=reg)
        self.resumed = Counter(
            "tokenrouter_requests_resumed", "Requests resumed after a model process died and restarted", registry=reg
        )
        self.stalled = Counter(
            "tokenrouter_requests_stalled", "Requests failed by the watchdog (no progress, HTTP 504)", registry=reg
        )
        self.active = Gauge("tokenrouter_requests_active", "Requests dispatched and not finished", registry=reg)
        self.waiting = Gauge("tokenrouter_requests_waiting", "Requests admitted but not yet dispatched", registry=reg)
        self.requests = Counter(
            "tokenrouter_requests",
            "Requests by outcome (finished, aborted, failed, rejected)",
            ["outcome"],
            registry=reg,
        )
        self.ttft_seconds = Histogram(
            "tokenrouter_time_to_first_token_seconds", "Time to first token", buckets=LATENCY_BUCKETS, registry=reg
        )
        self.e2e_seconds = Histogram(
            "tokenrouter_request_seconds", "Request latency, arrival to finish", buckets=LATENCY_BUCKETS, registry=reg
        )

    def name(self, model: int, replica: int = 0) -> str:
        """The label of ``model``'s replica ``replica`` (its name with one replica)."""
        if not 0 <= model < len(self.model_names):
            return str(model)
        names = self.replica_names[model]
        return names[replica] if 0 <= replica < len(names) else f"{self.model_names[model]}-r{replica}"

    def observe_step(self, report: StepReport) -> None:
        model = self.name(report.model, report.replica)
        if report.batch_size:
            self.steps.labels(model).inc()
            self.batch_size.labels(model).observe(report.batch_size)
            self.step_seconds.labels(model).observe(report.step_s)
            self.input_tokens.labels(model).inc(report.num_new_tokens)
            if report.host_gap_s is not None:
                self.host_gap.labels(model).observe(report.host_gap_s)
            if report.emulated_s is not None:
                self.observe_emulation(model, report)
        self.queue_length.labels(model).set(report.num_ready)
        self.resident.labels(model).set(report.num_resident)
        self.kv_usage.labels(model).set(report.kv_usage)
        if report.memory:
            self.observe_memory(model, report.memory)
        self.handoffs.labels(model).inc(report.num_handoffs)
        if report.handoffs_received:
            self.handoffs_received.labels(model).inc(report.handoffs_received)
            self.transit_seconds.labels(model).inc(report.handoff_transit_s)
            self.handoffs_late.labels(model).inc(report.handoffs_late)
        # A finishing step commits exactly one (its last) token; earlier ones were reported by their steps.
        committed = sum(len(t) for _, _, t in report.tokens) + len(report.finished)
        self.tokens.labels(model).inc(committed)
        if report.finished:
            self.finished.labels(model).inc(len(report.finished))

    def observe_memory(self, model: str, memory: dict[str, int]) -> None:
        """The core's KV accounting of one model (:func:`trserve.runtime.reports.memory_fields`)."""
        used, total = memory["blocks_used"], memory["blocks_total"]
        self._kv_totals[model] = total
        for kind, value in (("total", total), ("used", used), ("parked", memory["blocks_parked"]),
                            ("free", total - used)):  # fmt: skip
            self.kv_blocks.labels(model, kind).set(value)
        pid = memory.get("pid", 0)
        restarted = self._kv_pids.setdefault(model, pid) != pid
        self._kv_pids[model] = pid
        for event in MEMORY_EVENTS:
            self._count_kv_event(model, event, memory[event], restarted)
        self.kv_waiting.labels(model).set(memory.get("waiting_admission", 0))

    def _observe_no_blocks_held(self, model: str) -> None:
        total = self._kv_totals.get(model)
        if total is not None:
            for kind, value in (("used", 0), ("parked", 0), ("free", total)):
                self.kv_blocks.labels(model, kind).set(value)
            self.kv_waiting.labels(model).set(0)

    def _count_kv_event(self, model: str, event: str, count: int, restarted: bool) -> None:
        """Advance the counter by what ``model``'s subserver counted since its last report; from a restarted
        subserver (a crash resume: another process, or a count lower than the last one) all of it is new."""
        seen = self._kv_events_seen.get((model, event), 0)
        new = count if restarted or count < seen else count - seen
        self._kv_events_seen[(model, event)] = count
        if new:
            self.kv_events.labels(model, event).inc(new)
        else:
            self.kv_events.labels(model, event)  # the series exists (at 0) from the first report

    def observe_emulation(self, model: str, report: StepReport) -> None:
        """An emulated step: the latency it was given, how much longer it took, and its wait's CPU."""
        assert report.emulated_s is not None
        self.emulated_seconds.labels(model).inc(report.emulated_s)
        self.emulation_error.labels(model).observe(max(0.0, report.step_s - report.emulated_s))
        self.emulated_wait_cpu.labels(model).inc(report.wait_cpu_s)

    def observe_states(self, states: list[State]) -> None:
        """Refresh the per-model gauges from probe answers."""
        for state in states:
            if state.model < 0:  # a driver or dispatcher process, not a model; lockstep's holds the models' KV
                for model_index in range(len(self.model_names)):
                    memory = state.memory_by_model.get(model_index)
                    if memory is not None:
                        self.observe_memory(self.name(model_index, 0), memory)
                    else:  # no accounting (yet: a restarted lockstep driver before its first request) holds none
                        self._observe_no_blocks_held(self.name(model_index, 0))
                continue
            model = self.name(state.model, state.replica)
            self.queue_length.labels(model).set(state.num_ready)
            self.resident.labels(model).set(state.num_resident)
            self.kv_usage.labels(model).set(state.kv_usage)
            if state.memory:  # blocks freed by a release or an abort, which no step reports
                self.observe_memory(model, state.memory)

    def render(self) -> bytes:
        return generate_latest(self.registry)
