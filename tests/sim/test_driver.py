"""The SimPy driver: timing, event ordering, determinism, accounting, deadlines, traces."""

from dataclasses import replace

import pytest

from trcore import BatchingPolicy, InfeasibleError
from trcore.traces import traces_from_events
from trsim import RouterConfig, SimConfig, Simulation, simulate, with_traces
from trsim.latency import ConstantModel
from trsim.lengths import constant
from trsim.workload import WorkloadConfig


def single_model(latency=0.01, concurrency=4, output=5, threshold=1, **workload):
    wl = WorkloadConfig(concurrency=concurrency, prompt_tokens=constant(3), output_tokens=constant(output), **workload)
    return SimConfig(
        (ConstantModel(latency),), (BatchingPolicy(threshold),), RouterConfig("markov", {"P": [[1.0]]}), wl
    )


def test_single_model_closed_loop_is_exact():
    result = simulate(single_model(latency=0.01, concurrency=4, output=5), tokens=400)
    assert result.committed_tokens == 400
    assert result.simulated_s == pytest.approx(1.0)
    assert result.throughput_tok_s == pytest.approx(400.0)
    assert result.latency_p50_s == pytest.approx(0.05) and result.latency_p99_s == pytest.approx(0.05)
    assert result.ttft_p50_s == pytest.approx(0.01) and result.tpot_p50_s == pytest.approx(0.01)
    assert result.models[0].batch_histogram == {4: 100} and result.models[0].busy_fraction == pytest.approx(1.0)


def test_same_seed_same_run_other_seed_other_run(r2r):
    a, b = simulate(r2r((2, 1)), tokens=3000), simulate(r2r((2, 1)), tokens=3000)
    c = simulate(r2r((2, 1), seed=1), tokens=3000)
    assert a.simulated_s == b.simulated_s and a.models == b.models
    assert c.simulated_s != a.simulated_s


def test_tokens_are_conserved(r2r):
    sim = Simulation(r2r((2, 1), workload="short-reasoning"), record_trace=True)
    result = sim.run(tokens=20_000)
    in_flight = sum(len(r.output_token_ids) for r in sim.subservers[0].requests.values())
    finished = sum(t.num_kept for t in traces_from_events(e for s in sim.subservers for e in s.trace))
    assert finished == result.committed_tokens  # every kept step commits exactly one token
    assert in_flight < result.committed_tokens and result.num_finished > 0


def test_completions_at_one_instant_come_before_launches():
    # L0 = 10 ms, L1 = 20 ms. s1 moves to model 1 at 10 ms; s0 steps on model 0 until it moves there at
    # 30 ms, when model 1 also ends s1's step (scheduled first). Model 1 must launch s0 and s1 together at
    # 30 ms (s0 then finishes at 70 ms), not s1 alone before s0's hand-off is in (s0 would finish at 90 ms).
    traces = [
        {0: [(0, True), (0, True), (1, True)], 1: [(1, True)] * 4},
        {0: [(1, True)], 1: [(1, True)] * 4},
    ]
    wl = WorkloadConfig(concurrency=2, prompt_tokens=constant(1), output_tokens=constant(5))
    config = SimConfig(
        (ConstantModel(0.01), ConstantModel(0.02)),
        (BatchingPolicy(1), BatchingPolicy(1)),
        RouterConfig("trace", {"traces": traces}),
        wl,
    )
    result = simulate(config, time_s=0.08)
    assert result.num_finished == 1 and result.latency_p50_s == pytest.approx(0.07)
    assert result.models[1].batch_histogram == {1: 1, 2: 2}


def test_max_wait_deadline_wakes_the_model():
    # s1 stays on model 0 while s0 lives on model 1: with B_0 = 2 and 2 active requests, s1 launches alone
    # only when its 4 ms max wait runs out, every step.
    traces = [{0: [(1, True)], 1: [(1, True)] * 50}, {0: [(0, True)] * 50}]
    wl = WorkloadConfig(concurrency=2, prompt_tokens=constant(1), output_tokens=constant(50))
    config = SimConfig(
        (ConstantModel(0.01), ConstantModel(0.1)),
        (BatchingPolicy(2, max_wait_s=0.004), BatchingPolicy(1)),
        RouterConfig("trace", {"traces": traces}),
        wl,
    )
    sim = Simulation(config, chrome_trace=True)
    sim.run(time_s=0.1)
    launches = [s.launch_tick / 1e9 for s in sim.steps if s.model == 0]
    assert launches[:4] == pytest.approx([0.0, 0.014, 0.028, 0.042])


def test_threshold_table_follows_active_requests():
    config = single_model(latency=0.01, concurrency=4, output=1000)
    config = replace(config, policies=(BatchingPolicy(1, table={4: 4}),))
    result = simulate(config, tokens=400)
    assert result.models[0].batch_histogram == {4: 100}


def test_open_loop_deadlock_is_reported():
    # The first request steps alone (threshold capped by 1 active), moves to model 1; the second arrived
    # meanwhile at model 0: one ready request per model, B = 2 each, nothing else coming.
    config = single_model(latency=0.01, concurrency=1, output=1000, threshold=1)
    two = SimConfig(
        (ConstantModel(0.01), ConstantModel(0.01)),
        (BatchingPolicy(2), BatchingPolicy(2)),
        RouterConfig("markov", {"P": [[0.0, 1.0], [1.0, 0.0]]}),
        replace(config.workload, arrival="poisson", num_sessions=2, rate_per_s=1000.0),
    )
    with pytest.raises(InfeasibleError, match="deadlocked"):
        simulate(two)


def test_infeasible_closed_loop_thresholds_are_rejected(r2r):
    with pytest.raises(InfeasibleError, match="sum of"):
        Simulation(r2r((4, 2), concurrency=4))


def test_transfer_delay_slows_hand_offs(r2r):
    fast = simulate(r2r((1, 1), workload="short-reasoning"), tokens=20_000)
    slow = simulate(replace(r2r((1, 1), workload="short-reasoning"), transfer_delay_s=0.005), tokens=20_000)
    assert slow.throughput_tok_s < fast.throughput_tok_s
    assert slow.latency_p50_s > fast.latency_p50_s


def test_time_limit(r2r):
    result = simulate(r2r(), time_s=5.0)
    assert result.simulated_s == pytest.approx(5.0, abs=0.03)


def test_warmup_excludes_the_steps_up_to_its_token_count():
    # Two requests step together: on model 0 (10 ms) at 0-10 and 10-20 ms, then both move to model 1
    # (30 ms) and step at 20-50 and 50-80 ms. Committed: 2, 4, 6, 8 tokens at 10, 20, 50, 80 ms.
    trace = {0: [(0, True), (1, True)], 1: [(1, True), (1, True)]}
    wl = WorkloadConfig(concurrency=2, prompt_tokens=constant(1), output_tokens=constant(4), num_sessions=2)
    config = SimConfig(
        (ConstantModel(0.01), ConstantModel(0.03)),
        (BatchingPolicy(1), BatchingPolicy(1)),
        RouterConfig("trace", {"traces": [trace, trace]}),
        wl,
    )
    whole = simulate(config, tokens=8)
    assert whole.committed_tokens == 8 and whole.simulated_s == pytest.approx(0.08)
    assert whole.throughput_tok_s == pytest.approx(8 / 0.08)
    # Warm-up of 3 tokens ends at the step that reaches them: 4 tokens excluded, at 20 ms; measured: the
    # 4 tokens of the two model-1 steps over 20-80 ms.
    warm = simulate(config, tokens=8, warmup_tokens=3)
    assert warm.committed_tokens == 8 and warm.simulated_s == pytest.approx(0.08)
    assert warm.throughput_tok_s == pytest.approx(4 / 0.06)
    # Warm-up of exactly 2 tokens ends at 10 ms: 6 tokens over 10-80 ms.
    assert simulate(config, tokens=8, warmup_tokens=2).throughput_tok_s == pytest.approx(6 / 0.07)


def test_recorded_traces_replay_to_the_same_run(r2r):
    config = r2r((2, 1), concurrency=4, workload="short-reasoning")
    config = replace(config, workload=replace(config.workload, num_sessions=12))
    sim = Simulation(config, record_trace=True)
    original = sim.run()
    traces = sorted(traces_from_events(e for s in sim.subservers for e in s.trace), key=lambda t: int(t.request_id[1:]))
    replayed = simulate(with_traces(config, traces))
    assert replayed.num_finished == original.num_finished == 12
    assert replayed.committed_tokens == original.committed_tokens
    assert replayed.simulated_s == pytest.approx(original.simulated_s)
    assert replayed.models == original.models


def test_chrome_trace_has_every_step(r2r, tmp_path):
    import json

    from trsim.chrome import write_chrome_trace

    sim = Simulation(r2r(), chrome_trace=True)
    result = sim.run(tokens=500)
    path = tmp_path / "trace.json"
    write_chrome_trace(path, sim.steps, sim.config.names)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(events) == sum(m.steps for m in result.models)
    assert sum(e["args"]["committed"] for e in events) == result.committed_tokens
