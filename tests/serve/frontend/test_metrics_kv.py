"""The KV event counters of ``/metrics`` across step reports, probe answers and a restarted worker."""

from __future__ import annotations

import os

from prometheus_client.parser import text_string_to_metric_families

from trcore import KVBudget, KVMemory
from trserve.frontend.metrics import Metrics
from trserve.runtime.messages import State
from trserve.runtime.reports import memory_fields


def _memory(spilled: int, recomputed: int) -> dict[str, int]:
    return {"blocks_used": 3, "blocks_total": 10, "blocks_parked": 1, "spilled": spilled, "preempted": 0,
            "recomputed_tokens": recomputed, "admission_waits": 0}  # fmt: skip


def _events(metrics: Metrics) -> dict[tuple[str, str], float]:
    families = text_string_to_metric_families(metrics.render().decode())
    return {
        (s.labels["model"], s.labels["event"]): s.value
        for f in families
        for s in f.samples
        if s.name == "tokenrouter_kv_events_total"
    }


def test_repeated_reports_of_the_same_counts_add_nothing():
    metrics = Metrics(["small", "large"])
    metrics.observe_memory("large", _memory(2, 100))
    metrics.observe_memory("large", _memory(2, 100))  # a probe answer after the step report
    metrics.observe_memory("large", _memory(5, 400))
    events = _events(metrics)
    assert events[("large", "spilled")] == 5
    assert events[("large", "recomputed_tokens")] == 400
    assert events[("large", "preempted")] == 0


def test_a_restarted_worker_counts_on_from_where_the_server_was():
    metrics = Metrics(["small", "large"])
    metrics.observe_memory("large", _memory(5, 400))
    metrics.observe_memory("large", _memory(1, 30))  # the worker restarted: its own counts begin again
    metrics.observe_memory("large", _memory(2, 60))
    events = _events(metrics)
    assert events[("large", "spilled")] == 7
    assert events[("large", "recomputed_tokens")] == 460


def test_a_restarted_worker_whose_counts_caught_up_before_its_first_report_still_adds_them_all():
    metrics = Metrics(["small", "large"])
    metrics.observe_memory("large", {**_memory(1, 30), "pid": 100})
    # The restarted worker's first report already counts as much as the old one did: all of it is new.
    metrics.observe_memory("large", {**_memory(1, 30), "pid": 101})
    metrics.observe_memory("large", {**_memory(3, 90), "pid": 101})
    events = _events(metrics)
    assert events[("large", "spilled")] == 4
    assert events[("large", "recomputed_tokens")] == 120
    assert memory_fields(KVMemory(KVBudget(4)))["pid"] == os.getpid()  # every report says whose counts they are


def test_models_count_apart():
    metrics = Metrics(["small", "large"])
    metrics.observe_memory("small", _memory(1, 10))
    metrics.observe_memory("large", _memory(3, 10))
    events = _events(metrics)
    assert (events[("small", "spilled")], events[("large", "spilled")]) == (1, 3)


def _blocks(metrics: Metrics, model: str) -> dict[str, float]:
    families = text_string_to_metric_families(metrics.render().decode())
    return {
        s.labels["kind"]: s.value
        for f in families
        for s in f.samples
        if s.name == "tokenrouter_kv_blocks" and s.labels["model"] == model
    }


def test_a_restarted_lockstep_driver_without_accounting_yet_reads_as_holding_no_blocks():
    metrics = Metrics(["large", "small"])
    driver = State(-1, 1, 100, 2, 1, 0.0, 0, 9, memory_by_model={0: _memory(2, 100), 1: _memory(0, 0)})
    metrics.observe_states([driver])
    assert _blocks(metrics, "large") == {"total": 10, "used": 3, "parked": 1, "free": 7}
    restarted = State(-1, 2, 101, 0, 0, 0.0, 0, 0)  # it asks its engines for their budgets at its first request
    metrics.observe_states([restarted])
    assert _blocks(metrics, "large") == {"total": 10, "used": 0, "parked": 0, "free": 10}
    assert _blocks(metrics, "small")["used"] == 0
    assert _events(metrics)[("large", "spilled")] == 2  # what happened before the crash still counts
    metrics.observe_states([State(-1, 3, 101, 0, 0, 0.0, 0, 1, memory_by_model={0: _memory(1, 10)})])
    assert _blocks(metrics, "large")["used"] == 3 and _events(metrics)[("large", "spilled")] == 3


def test_a_driver_that_never_accounted_for_a_model_adds_no_kv_series():
    metrics = Metrics(["large", "small"])
    metrics.observe_states([State(-1, 1, 100, 0, 0, 0.0, 0, 0)])  # per-token's dispatcher, or lockstep off
    assert _blocks(metrics, "large") == {} and _blocks(metrics, "small") == {}
