"""The sampled throughput method: the same process as the exact chain, estimated from Monte Carlo lanes and
raced over threshold vectors. Checked against the exact chain where it runs and against the simulator beyond.
"""

from __future__ import annotations

import numpy as np
import pytest

from trcore.errors import ConfigError
from trcore.throughput import SamplingConfig, ThroughputModel
from trcore.throughput import model as throughput_model
from trcore.throughput.lanes import Lanes

R2R_P, R2R_C = [[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]
# SLM -> mid -> LLM escalation (benchmarks/optimize_bench.py). 28 ms rather than the 27.9 ms keeps the
# exact chain quick (a 2 ms time unit instead of 0.1 ms): at 27.9 ms its optimize takes minutes from N = 6.
M3_P = [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [1.0, 0.0, 0.0]]
M3_C = [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
TWO = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279])
THREE = ThroughputModel(M3_P, M3_C, [0.006, 0.012, 0.028])


def test_a_model_alone_is_sampled_exactly():
    res = ThroughputModel([[1.0]], [[2.0]], [0.01]).solve(5, [3], method="sampled")
    assert res.throughput_tok_s == pytest.approx(5 * 2 / 0.01, rel=1e-12)
    assert res.std_error_tok_s == pytest.approx(0.0, abs=1e-9)
    assert res.num_states == 0 and res.method == "sampled"


def test_lanes_follow_the_launch_rule_and_the_batch_cap():
    spec = ThroughputModel([[1.0]], [[1.0]], [[0.001, 0.002, 0.003]], quantum_s=1e-3, max_batch=[3]).spec
    lanes = Lanes(spec, 7, np.array([[1], [3]]), np.random.default_rng(0))
    tokens, time_units = lanes.run(10)
    # Batches of 3 (the cap) every 3 ms on both lanes, whatever the threshold.
    assert tokens.tolist() == [30.0, 30.0]
    assert time_units.tolist() == [30.0, 30.0]


def test_same_seed_same_numbers_other_seed_other_numbers():
    a = TWO.solve(8, [2, 4], method="sampled")
    b = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279]).solve(8, [2, 4], method="sampled")
    c = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279], sampling=SamplingConfig(seed=1)).solve(8, [2, 4], "sampled")
    assert a == b
    assert c.throughput_tok_s != a.throughput_tok_s


@pytest.mark.parametrize("thresholds", [(1, 1), (1, 6), (3, 9), (9, 2)])
def test_one_vector_agrees_with_the_chain_within_its_error(thresholds):
    exact = TWO.solve(12, thresholds)
    sampled = TWO.solve(12, thresholds, method="sampled")
    assert sampled.std_error_tok_s <= 0.0015 * sampled.throughput_tok_s
    assert abs(sampled.throughput_tok_s - exact.throughput_tok_s) <= 4 * sampled.std_error_tok_s


def test_batch_dependent_latency_and_max_batch_agree_with_the_chain():
    scenario = ThroughputModel(R2R_P, R2R_C, [[0.004, 0.005, 0.006], [0.02, 0.024, 0.0279]], max_batch=[3, 4])
    exact, sampled = scenario.solve(9, [2, 3]), scenario.solve(9, [2, 3], method="sampled")
    assert sampled.throughput_tok_s == pytest.approx(exact.throughput_tok_s, rel=0.01)


@pytest.mark.parametrize(
    ("scenario", "n"), [(TWO, 2), (TWO, 4), (TWO, 8), (TWO, 12), (TWO, 16), (THREE, 2), (THREE, 4), (THREE, 6)]
)
def test_sampled_optimize_agrees_with_the_exact_optimum(scenario, n):
    exact = scenario.optimize(n)
    by_vector = {c.thresholds: c.throughput_tok_s for c in exact.candidates}
    sampled = scenario.optimize(n, method="sampled")
    assert sampled.method == "sampled"
    assert len(sampled.candidates) == len(exact.candidates)
    chosen = by_vector[sampled.thresholds]
    # Its own figure is the chosen vector's throughput, and that vector is (nearly) the best.
    assert sampled.throughput_tok_s == pytest.approx(chosen, rel=0.02)
    assert chosen >= 0.98 * exact.throughput_tok_s


def test_sampled_optimize_with_max_batch_and_batch_dependent_latency():
    scenario = ThroughputModel(R2R_P, R2R_C, [[0.004, 0.005, 0.006], [0.02, 0.024, 0.0279]], max_batch=[4, 3])
    exact, sampled = scenario.optimize(8), scenario.optimize(8, method="sampled")
    assert [c.thresholds for c in sampled.candidates] == [c.thresholds for c in exact.candidates]
    chosen = next(c.throughput_tok_s for c in exact.candidates if c.thresholds == sampled.thresholds)
    assert sampled.throughput_tok_s == pytest.approx(chosen, rel=0.02)
    assert chosen >= 0.98 * exact.throughput_tok_s


def test_min_gain_returns_no_delay_when_the_gain_is_too_small():
    sampled = TWO.optimize(8, method="sampled", min_gain=0.5)
    assert sampled.thresholds == (1, 1)
    assert sampled.throughput_tok_s == pytest.approx(TWO.solve(8, [1, 1]).throughput_tok_s, rel=0.02)


def test_auto_is_exact_while_small_and_samples_past_the_limits(monkeypatch):
    assert TWO.optimize(6, method="auto").method == "exact"
    assert TWO.solve(6, [1, 2], method="auto").method == "exact"
    monkeypatch.setattr(throughput_model, "AUTO_OPTIMIZE_MAX_STATES", 100)
    monkeypatch.setattr(throughput_model, "AUTO_SOLVE_MAX_STATES", 10)
    assert TWO.optimize(6, method="auto").method == "sampled"
    assert TWO.solve(6, [1, 2], method="auto").method == "sampled"
    monkeypatch.setattr(throughput_model, "AUTO_OPTIMIZE_MAX_STATES", 10**6)
    monkeypatch.setattr(throughput_model, "AUTO_OPTIMIZE_MAX_WORK", 1000)
    assert TWO.optimize(6, method="auto").method == "sampled"


def test_exact_never_falls_back():
    small = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279], max_states=100)
    with pytest.raises(ConfigError, match="states"):
        small.optimize(6, method="exact")


@pytest.mark.parametrize(("field", "value"), [("copies", 1), ("rel_std_error", 0.0), ("z", -1.0), ("seed", -3)])
def test_bad_sampling_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SamplingConfig(**{field: value})


def test_unknown_method_is_rejected():
    with pytest.raises(ConfigError, match="method"):
        TWO.optimize(4, method="fast")


@pytest.mark.parametrize("n", [32, 64])
def test_sampled_optimum_agrees_with_the_simulator_at_production_concurrency(n):
    from trsim import markov_config, simulate  # the simulator is required here: no silent skip without simpy

    def simulated(thresholds):
        config = markov_config(R2R_P, R2R_C, [0.006, 0.0279], list(thresholds), n, "endless", seed=5)
        return simulate(config.with_quantum(1e-4), tokens=300_000, warmup_tokens=20_000).throughput_tok_s

    best = TWO.optimize(n, method="sampled")
    best_sim = simulated(best.thresholds)
    assert best.throughput_tok_s == pytest.approx(best_sim, rel=0.02)
    # A vector far from the optimum does clearly worse in the model, and in the simulator too.
    worst = min(best.candidates, key=lambda c: c.throughput_tok_s)
    worst_sim = simulated(worst.thresholds)
    assert worst.throughput_tok_s < 0.9 * best.throughput_tok_s and worst_sim < 0.9 * best_sim
    assert worst.throughput_tok_s == pytest.approx(worst_sim, rel=0.02)


def test_sampled_optimum_at_n64_agrees_with_its_exact_chain():
    # Large thresholds synchronize the models: the chosen vector's own chain is small even at N = 64.
    best = TWO.optimize(64, method="sampled")
    exact = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279], max_states=50_000).solve(64, best.thresholds)
    assert best.throughput_tok_s == pytest.approx(exact.throughput_tok_s, rel=0.02)
