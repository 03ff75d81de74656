"""The KV event counters of ``/metrics`` across step reports, probe answers and a restarted worker."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from trserve.frontend.metrics import Metrics


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


def test_models_count_apart():
    metrics = Metrics(["small", "large"])
    metrics.observe_memory("small", _memory(1, 10))
    metrics.observe_memory("large", _memory(3, 10))
    events = _events(metrics)
    assert (events[("small", "spilled")], events[("large", "spilled")]) == (1, 3)
