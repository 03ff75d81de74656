"""Routing statistics: estimates from traces of a known stationary router match its P, C and run lengths."""

import math
import random

import pytest

from trcore import CLIENT, BatchingPolicy, ConfigError, MarkovRouter, RequestSpec, Subserver, new_request_message
from trcore.routing_stats import estimate_routing_stats
from trcore.step import StepResult
from trcore.traces import trace_from_dict, trace_to_dict, traces_from_events

P3 = [[0.85, 0.10, 0.05], [0.50, 0.40, 0.10], [0.30, 0.20, 0.50]]
C3 = [[1.0, 0.6, 1.0], [1.0, 1.0, 0.8], [0.9, 1.0, 1.0]]


def run_closed_loop(P, C, num_requests, max_tokens, concurrency=8, seed=0):
    """Drive one Subserver per model with MarkovRouters in lockstep rounds (launch all, complete all, then
    deliver), replacing each finished request by a new one at model 0, until ``num_requests`` finished.
    Returns the recorded traces as JSON records (``trcore.traces`` format)."""
    num_models = len(P)
    rng = random.Random(seed)
    subs = [
        Subserver(MarkovRouter(m, num_models, P, C, rng=rng), BatchingPolicy(threshold=1), record_trace=True)
        for m in range(num_models)
    ]
    started = finished = 0

    def admit(now):
        nonlocal started
        spec = RequestSpec(f"r{started}", num_prompt_tokens=2, max_tokens=max_tokens)
        subs[0].receive(new_request_message(spec, [1, 2], num_models), now)
        started += 1

    for _ in range(concurrency):
        admit(0.0)
    now = 0.0
    while finished < num_requests:
        now += 1.0
        batches = [(sub, sub.launch(now)) for sub in subs]
        handoffs = []
        for sub, batch in batches:
            if batch is not None:
                step = StepResult(token_ids=[7] * batch.size, request_ids=batch.request_ids)
                handoffs.extend(sub.complete(batch, step, now))
        for dest, msg in handoffs:
            if dest == CLIENT:
                finished += 1
                admit(now)
            else:
                subs[dest].receive(msg, now)
    return [trace_to_dict(t) for t in traces_from_events(e for sub in subs for e in sub.trace)]


def sample_chains(P, C, num_requests, num_steps, seed=0):
    """Sample traces straight from the Markov chain (no subservers): independent requests of fixed length."""
    rng = random.Random(seed)
    traces = []
    for _ in range(num_requests):
        model, steps = 0, []
        for _ in range(num_steps):
            dest = rng.choices(range(len(P)), weights=P[model])[0]
            steps.append([model, dest, int(rng.random() < min(C[model][dest], 1.0))])
            model = dest
        traces.append(steps)
    return traces


def assert_close_to_truth(stats, P, C, sigmas=4.5):
    for i, row in enumerate(P):
        n_i = sum(stats.transition_counts[i])
        assert n_i > 500, f"too few steps on model {i} to test"
        for j, p in enumerate(row):
            assert abs(stats.P[i][j] - p) <= sigmas * math.sqrt(p * (1 - p) / n_i) + 1e-12, (i, j)
            n_ij = stats.transition_counts[i][j]
            c = min(C[i][j], 1.0)
            if n_ij:
                assert abs(stats.C[i][j] - c) <= sigmas * math.sqrt(c * (1 - c) / n_ij) + 1e-12, (i, j)


def test_estimates_from_subserver_loop_match_markov_router():
    records = run_closed_loop(P3, C3, num_requests=120, max_tokens=60)
    stats = estimate_routing_stats(records, num_models=3)
    assert stats.num_requests == len(records) >= 120
    assert_close_to_truth(stats, P3, C3)
    for i in range(3):
        assert sum(stats.P[i]) == pytest.approx(1.0)
        assert sum(stats.transition_counts[i]) == sum(s[0] == i for r in records for s in r["steps"])
    parsed = [trace_from_dict(r, 3) for r in records]  # consistent traces: each step where the last one sent it
    assert estimate_routing_stats(parsed, num_models=3) == stats


def test_estimates_from_sampled_chains_match_p_and_c():
    stats = estimate_routing_stats(sample_chains(P3, C3, num_requests=200, num_steps=100, seed=1))
    assert stats.num_models == 3 and stats.num_steps == 20_000
    assert_close_to_truth(stats, P3, C3)
    assert stats.p_stderr(0, 1) == pytest.approx(math.sqrt(0.1 * 0.9 / sum(stats.transition_counts[0])), rel=0.1)


def test_run_lengths_are_geometric_with_mean_one_over_leave_probability():
    P = [[0.9, 0.1], [0.6, 0.4]]
    stats = estimate_routing_stats(sample_chains(P, [[1.0] * 2] * 2, num_requests=100, num_steps=400, seed=2))
    for m, stay in enumerate((0.9, 0.4)):
        runs = stats.run_lengths[m]
        n = runs.num_runs
        true_mean, true_sd = 1 / (1 - stay), math.sqrt(stay) / (1 - stay)
        assert abs(runs.mean - true_mean) <= 4.5 * true_sd / math.sqrt(n)
        assert runs.censored_mean == pytest.approx(stats.geometric_mean_run(m))
        for k in (1, 2, 3):  # P(run = k) = stay^(k-1) (1 - stay)
            p_k = stay ** (k - 1) * (1 - stay)
            assert abs(runs.fraction(k) - p_k) <= 4.5 * math.sqrt(p_k * (1 - p_k) / n)


def test_runs_counted_by_leave_decisions_and_censored_at_request_end():
    traces = [
        {"request_id": "a", "steps": [[0, 0, 1], [0, 1, 0], [1, 1, 1], [1, 0, 1], [0, 0, 1]]},
        {"request_id": "b", "steps": [[0, 1, 1]]},
    ]
    stats = estimate_routing_stats(traces, num_models=3)
    assert stats.run_lengths[0].counts == {2: 1, 1: 1}
    assert stats.run_lengths[0].censored == {1: 1}
    assert stats.run_lengths[1].counts == {2: 1}
    assert stats.transition_counts[0] == (2, 2, 0)
    assert stats.C[0][1] == 0.5 and stats.C[1][0] == 1.0
    assert stats.unvisited == (2,) and stats.P[2] == (0.0, 0.0, 1.0) and stats.C[2] == (1.0, 1.0, 1.0)
    assert math.isnan(stats.p_stderr(2, 2))


def test_entry_model_redirects_each_request_last_step():
    stats = estimate_routing_stats([[[0, 1, 1], [1, 1, 1]]], entry_model=0)
    assert stats.transition_counts == ((0, 1), (1, 0))


def test_to_dict_is_json_ready():
    import json

    d = estimate_routing_stats([[[0, 0, 1], [0, 1, 1], [1, 0, 0]]]).to_dict()
    back = json.loads(json.dumps(d))
    assert back["P"][0] == [0.5, 0.5] and back["run_lengths"][0]["counts"] == {"2": 1}


@pytest.mark.parametrize(
    ("traces", "field"),
    [
        ([], "traces"),
        ([{"request_id": "x"}], "trace"),
        ([[[0, 1]]], "trace"),
        ([[[0, 5, 1]]], "trace"),
        ([[[0, 1, 2]]], "trace"),
    ],
)
def test_bad_traces_raise_config_error(traces, field):
    with pytest.raises(ConfigError) as info:
        estimate_routing_stats(traces, num_models=2 if traces else None)
    assert info.value.field == field
