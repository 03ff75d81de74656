"""The server's adaptive tuner without a server: step reports scripted by hand become the controller's window
(routes, kept tokens, finishes to the entry model, step times), a collapsed vector is switched away from in one
``Thresholds`` message to every subserver, and the gauges show it."""

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from trserve.config import AdaptiveThresholdsConfig
from trserve.frontend.tuner import Tuner
from trserve.runtime.messages import Finished, StepReport, Thresholds

#: The issue's collapse case (N = 8, P = [[0.85, 0.15], [0.5, 0.5]]) with the issue's batch-1 step times.
STEP_S = (0.006, 0.0279)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def report(model: int, stays: int, moves: int, dropped: int = 0, finished: int = 0) -> StepReport:
    """A batch-4 step of ``model``: ``stays`` requests stay (token kept), ``moves`` go to the other model (kept),
    ``dropped`` go there with their token dropped, ``finished`` end here."""
    other = 1 - model
    routes = [(f"s{k}", model, 1, None) for k in range(stays)]
    routes += [(f"m{k}", other, 1, None) for k in range(moves + dropped)]
    tokens = [(rid, 0, (7,)) for rid, *_ in routes[: stays + moves]]
    done = [Finished(f"f{k}", (7,), "length") for k in range(finished)]
    size = stays + moves + dropped + finished
    return StepReport(model, size, size, STEP_S[model], 0, size, moves, 0.0, tokens, done, [], routes)


def tuner(thresholds, sent, clock, **knobs):
    cfg = AdaptiveThresholdsConfig(window_s=5.0, min_steps=100, **knobs)
    return Tuner(
        cfg, thresholds, entry_model=0, max_batch=[8, 8], model_names=["small", "large"],
        registry=CollectorRegistry(), broadcast=sent.append, num_active=lambda: 8, clock=clock, say=lambda _: None,
    )  # fmt: skip


def feed(t: Tuner) -> None:
    for _ in range(50):  # 850 / 150 from the small model, 500 / 500 from the large (finishes count as to 0)
        t.on_step(report(0, stays=17, moves=3))
        t.on_step(report(1, stays=10, moves=9, finished=1))


def test_reports_become_the_window_by_hand():
    sent, clock = [], Clock()
    t = tuner((1, 1), sent, clock)
    t.on_step(report(0, stays=2, moves=1, dropped=1))
    t.on_step(report(1, stays=1, moves=0, finished=2))
    obs = t.builder.flush(1.0)
    assert obs.transitions == ((2, 2), (2, 1)) and obs.kept == ((2, 1), (2, 1))
    assert obs.steps[0] == {4: (1, 0.006, 0.006**2)} and obs.steps[1] == {3: (1, 0.0279, 0.0279**2)}


def test_a_collapsed_vector_is_switched_in_one_message_to_all():
    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock)
    feed(t)
    clock.t = 5.0
    retune = asyncio.run(t.tick())
    assert retune is not None and retune.applied and retune.old == (8, 1)
    assert retune.inputs.P[0] == (0.85, 0.15) and retune.inputs.P[1] == (0.5, 0.5)
    assert sent == [Thresholds(retune.new)] and t.thresholds == retune.new and retune.new[0] < 8
    text = generate_latest(t.registry).decode()
    assert f'tokenrouter_adaptive_thresholds{{model="small"}} {float(retune.new[0])}' in text
    assert 'tokenrouter_adaptive_p{dst="large",src="small"} 0.15' in text
    assert "tokenrouter_adaptive_switches_total 1.0" in text
    state = t.state()
    assert state["thresholds"] == list(retune.new) and state["switches"][0]["old"] == [8, 1]
    # Its clock and its CPU: the solve ran (a few ms of CPU at least), and the window's feeding is counted too.
    assert state["now_s"] == 5.0 and state["cpu_s"] > 0.0 and state["num_deferred"] == 0
    t.stop()


def test_the_cpu_count_covers_feeding_and_deciding():
    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock)
    fed_at = time.thread_time()
    feed(t)
    fed = t.cpu_s
    assert 0.0 < fed <= time.thread_time() - fed_at  # this thread's CPU while feeding bounds what was counted
    clock.t = 5.0
    asyncio.run(t.tick())
    assert t.cpu_s > fed  # the solve's CPU, in the solver's process, was added
    t.stop()


def test_over_its_cpu_budget_the_controller_defers_solving():
    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock, max_cpu_fraction=0.01, cpu_credit_s=0.0)
    t.cpu_s = 0.5  # as if it had solved for 0.5 s: within budget again after 50 s
    feed(t)
    clock.t = 5.0
    assert asyncio.run(t.tick()) is None and t.num_deferred == 1 and sent == []
    assert t.controller.num_solves == 0
    clock.t = 51.0
    feed(t)
    retune = asyncio.run(t.tick())
    assert retune is not None and retune.applied and t.controller.num_solves == 1 and len(sent) == 1
    t.stop()


def test_stationary_reports_send_nothing_more():
    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock, min_interval_s=0.0)
    for k in range(1, 6):
        feed(t)
        clock.t = 5.0 * k
        asyncio.run(t.tick())
    assert len(sent) == 1 and t.controller.num_solves == 1
    t.stop()


def test_a_dead_solver_process_is_replaced_at_the_next_solve():
    from concurrent.futures.process import BrokenProcessPool

    import pytest

    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock)
    for process in t.pool()._processes.values() if t.pool().submit(int).result() == 0 else ():
        process.kill()  # as the OOM killer would
    feed(t)
    clock.t = 5.0
    with pytest.raises(BrokenProcessPool):
        asyncio.run(t.tick())
    assert t._pool is None  # a fresh process at the next solve, instead of failing every decision from now on
    assert t.pool().submit(int, "3").result() == 3
    t.stop()


def test_an_auto_solve_over_its_cpu_limit_is_redone_sampled(monkeypatch):
    from trserve.frontend import tuner as module

    sent, clock = [], Clock()
    t = tuner((8, 1), sent, clock)
    feed(t)
    t.controller.observe(t.builder.flush(5.0))
    job = t.controller.plan(5.0)
    assert job is not None and job.config.method == "auto"
    quick, _ = module.timed_solve(job)
    assert quick.method == "exact"  # N = 8: cheap, exact within the limit
    monkeypatch.setattr(module, "EXACT_CPU_LIMIT_S", 1e-4)  # as an exact solve near the auto limits would run
    capped, cpu_s = module.timed_solve(job)
    assert capped.method == "sampled" and capped.new == quick.new and cpu_s > 0
    assert module.signal.getitimer(module.signal.ITIMER_PROF) == (0.0, 0.0)  # the timer is off again


def test_with_no_window_to_estimate_the_concurrency_reads_nan():
    sent, clock = [], Clock()
    t = tuner((1, 1), sent, clock)
    feed(t)
    clock.t = 5.0
    asyncio.run(t.tick())
    assert "tokenrouter_adaptive_concurrency 8.0" in generate_latest(t.registry).decode()
    clock.t = 30.0  # idle since: the window empties
    asyncio.run(t.tick())
    assert "tokenrouter_adaptive_concurrency NaN" in generate_latest(t.registry).decode()
    t.stop()


def test_after_a_change_the_measured_rate_counts_only_the_window_kept():
    """The controller drops its window's spans from before a change in the traffic; the measured tok/s gauge must
    drop their tokens too (it divided the whole window_s of tokens by the newer span: 5x the steady rate)."""
    sent, clock = [], Clock()
    t = tuner((1, 1), sent, clock, tick_s=1.0, min_interval_s=0.0)
    measured = []
    for second in range(1, 10):
        for _ in range(40):  # 520 tokens a second throughout; the hand-off share moves after 6 s
            if second <= 6:
                t.on_step(report(0, stays=5, moves=1))
                t.on_step(report(1, stays=3, moves=3, finished=1))
            else:
                t.on_step(report(0, stays=3, moves=3))
                t.on_step(report(1, stays=1, moves=6))
        clock.t = float(second)
        asyncio.run(t.tick())
        text = generate_latest(t.registry).decode()
        measured.append(next(line for line in text.splitlines() if line.startswith("tokenrouter_adaptive_measured")))
    t.stop()
    assert t.controller.changes, "the change test saw the new traffic"
    assert measured == ["tokenrouter_adaptive_measured_tok_s 520.0"] * 9, measured


def test_an_idle_span_counts_the_active_requests_the_front_end_has_now():
    """Step reports carry the active count in, but none come while the server is idle: the span after the last
    requests ended must count none active, not the count the last report saw (it was 8 for as long as it idled)."""
    sent, clock, active = [], Clock(), [8]
    t = tuner((1, 1), sent, clock)
    t.num_active = lambda: active[0]
    t.on_step(report(0, stays=0, moves=0, finished=4))
    active[0] = 0  # the front end ends the finished requests after the report
    clock.t = 1.0
    asyncio.run(t.tick())
    clock.t = 3.0
    asyncio.run(t.tick())
    spans = t.controller.window.observations
    assert [o.active_s for o in spans] == [8.0, 0.0], spans
    t.stop()


def test_with_replicas_the_window_sees_one_pipelines_share_and_the_prediction_is_the_servers():
    """Two copies of each model run 16 requests as two pipelines of 8, each replica's table keyed on its 8: the
    controller solves one pipeline at 8 (it solved at 16) and shows the throughput of both."""
    cfg = AdaptiveThresholdsConfig(window_s=5.0, min_steps=100)
    sent, clock = [], Clock()
    kwargs = dict(entry_model=0, max_batch=[8, 8], model_names=["small", "large"], broadcast=sent.append,
                  clock=clock, say=lambda _: None)  # fmt: skip
    two = Tuner(cfg, (8, 1), registry=CollectorRegistry(), num_active=lambda: 16, pipelines=2, **kwargs)
    one = Tuner(cfg, (8, 1), registry=CollectorRegistry(), num_active=lambda: 8, **kwargs)
    for t in (two, one):
        feed(t)
    clock.t = 5.0
    retunes = [asyncio.run(t.tick()) for t in (two, one)]
    assert retunes[0].inputs.concurrency == retunes[1].inputs.concurrency == 8
    assert retunes[0].new == retunes[1].new
    shown = [t.registry.get_sample_value("tokenrouter_adaptive_predicted_tok_s") for t in (two, one)]
    assert shown[0] == pytest.approx(2 * shown[1])
    for t in (two, one):
        t.stop()


def test_a_failure_report_is_not_a_step_of_no_time():
    """A worker reports requests it failed without a step (too large for its KV cache: batch size 0; a batch its
    engine failed: the batch's size) with step_s 0.0. They are no measurement: counted as steps they dragged the
    model's fitted step time towards 0 (a step of batch 0, or of batch 8 in no time), and the window's step count up."""
    from trserve.runtime.messages import Failed

    sent, clock = [], Clock()
    t = tuner((1, 1), sent, clock)
    feed(t)
    for size in (0, 8, 8):
        failed = [Failed(f"x{size}-{k}", "model 1 failed") for k in range(max(size, 1))]
        t.on_step(StepReport(1, size, 0, 0.0, 0, 0, 0, 0.0, failed=failed))
    clock.t = 5.0
    asyncio.run(t.tick())
    estimate = t.controller.last_estimate
    assert estimate is not None and estimate.num_steps == (50, 50)
    assert min(estimate.latency_s[1]) == pytest.approx(STEP_S[1])  # every large step measured 27.9 ms
    t.stop()


def test_with_no_window_the_predicted_throughput_reads_nan_beside_the_measured():
    """Idle, the window empties: the concurrency reads NaN, and so must the model's throughput at it (the last
    prediction, 8 requests' worth, stood beside a measured 0 tok/s for as long as the server idled)."""
    sent, clock = [], Clock()
    t = tuner((1, 1), sent, clock)
    feed(t)
    clock.t = 5.0
    asyncio.run(t.tick())
    lines = generate_latest(t.registry).decode().splitlines()
    assert float(next(x for x in lines if x.startswith("tokenrouter_adaptive_predicted_tok_s ")).split()[1]) > 0
    clock.t = 30.0  # idle since: the window empties
    asyncio.run(t.tick())
    text = generate_latest(t.registry).decode()
    assert "tokenrouter_adaptive_measured_tok_s 0.0" in text and "tokenrouter_adaptive_predicted_tok_s NaN" in text
    feed(t)  # the same traffic again: once the window is full, the prediction (unchanged, no new solve) is back
    clock.t = 35.0
    asyncio.run(t.tick())
    lines = generate_latest(t.registry).decode().splitlines()
    assert float(next(x for x in lines if x.startswith("tokenrouter_adaptive_predicted_tok_s ")).split()[1]) > 0
    t.stop()
