"""KV memory in the throughput model, on hand-worked cases: N requests of mean footprint prompt + output / 2
resident on every model they visit, the model that runs out, and solve / optimize refusing such an N."""

import pytest

from trcore import MemoryInfeasibleError
from trcore.errors import ConfigError
from trcore.throughput import KVDemand, ThroughputModel, memory_check
from trcore.throughput.memory import visited_models

P = [[0.65, 0.35], [1.0, 0.0]]
C = [[1.0, 0.0], [1.0, 0.0]]


def test_footprint_is_prompt_plus_half_the_output():
    assert KVDemand((None, None), 100, 600).footprint_tokens == 400


def test_the_smaller_cache_of_the_visited_models_bounds_concurrency():
    demand = KVDemand((10_000, 4_000), mean_prompt_tokens=100, mean_output_tokens=600)  # 400 tokens each
    at_10 = memory_check(P, demand, 10)
    assert at_10.need_tokens == (4_000, 4_000) and at_10.is_feasible
    assert (at_10.max_concurrency, at_10.bound_model) == (10, 1)  # 4,000 // 400 against 10,000 // 400 = 25
    at_11 = memory_check(P, demand, 11)
    assert not at_11.is_feasible
    assert at_11.describe(["slm", "llm"]) == (
        "11 requests of 400 KV tokens each (mean resident footprint) need 4400 tokens on llm, which holds 4000: "
        "at most 10 fit"
    )


def test_a_model_no_request_reaches_needs_nothing():
    P3 = [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    assert visited_models(P3) == (0, 1)
    verdict = memory_check(P3, KVDemand((1_000, 1_000, 10), 100), 10)
    assert verdict.need_tokens == (1_000, 1_000, 0) and verdict.is_feasible and verdict.max_concurrency == 10
    assert memory_check(P3, KVDemand((None, None, None), 100), 10**6).max_concurrency is None


def test_solve_and_optimize_refuse_a_concurrency_that_does_not_fit():
    kv = KVDemand((10_000, 4_000), 100, 600)
    model = ThroughputModel(P, C, [0.006, 0.0279], quantum_s=1e-3, kv=kv)
    free = ThroughputModel(P, C, [0.006, 0.0279], quantum_s=1e-3)
    assert model.solve(4, (1, 1)).throughput_tok_s == free.solve(4, (1, 1)).throughput_tok_s
    assert model.memory(11).bound_model == 1 and free.memory(11) is None
    with pytest.raises(MemoryInfeasibleError, match=r"kv: 11 requests .* on model 1, which holds 4000: at most 10"):
        model.solve(11, (1, 1))
    with pytest.raises(MemoryInfeasibleError, match="at most 10 fit"):
        model.optimize(12)
    with pytest.raises(ConfigError, match="one per model"):
        ThroughputModel(P, C, [0.006, 0.0279], kv=KVDemand((1,), 10))


def test_with_a_margin_n_fit_while_n_footprints_plus_z_sqrt_n_deviations_fit():
    # 400 tokens a request, std 100, z = 2: N = 9 needs 3,600 + 2 x 3 x 100 = 4,200; N = 10: 4,000 + 632 = 4,632.
    demand = KVDemand((4_200,), 100, 600, footprint_std_tokens=100, overflow_z=2.0)
    assert demand.max_fitting(4_200) == 9 and demand.max_fitting(4_199) == 8
    assert KVDemand((4_000,), 100, 600).max_fitting(4_000) == 10  # no margin: capacity / footprint


def test_length_spread_raises_the_resident_footprint():
    # Outputs with E[L^2] / E[L]^2 = 1.5: a resident holds 100 + 1.5 x 600 / 2 = 550 tokens on average.
    assert KVDemand((None,), 100, 600, output_spread=1.5).footprint_tokens == 550
    with pytest.raises(ConfigError, match="output_spread"):
        KVDemand((None,), 100, 600, output_spread=0.5)
