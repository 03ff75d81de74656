"""`tokenrouter plan` and KV memory: per-model capacities, closed-loop points that do not fit skipped, the
memory-bound concurrency worked out by hand, the open loop's batch cap, and the bound simulated with its pool."""

import math

import pytest

from trcore.throughput import KVDemand
from trsim.lengths import constant
from trsim.placement import Placement, kv_capacities, kv_capacity_tokens, latency_models
from trsim.plan import PlanConfig, closed_loop
from trsim.plan_memory import batch_cap, confirm_memory_bound
from trsim.roofline import max_batch_tokens
from trsim.workload import WorkloadConfig

R2R = {"small": "DeepSeek-R1-Distill-Qwen-1.5B", "large": "DeepSeek-R1-Distill-Qwen-32B"}
P = ((0.65, 0.35), (1.0, 0.0))
C = ((1.0, 0.0), (1.0, 0.0))
SEP, COLOC = Placement((1, 2), 1, False), Placement((1, 1), 1, True)


def lengths(prompt, output):
    return WorkloadConfig(prompt_tokens=constant(prompt), output_tokens=constant(output))


def test_each_model_has_its_own_capacity_unless_colocated():
    models = latency_models(SEP, "a100-80g", R2R)
    assert kv_capacities(SEP, models) == tuple(max_batch_tokens(m, 0.9) for m in models)
    assert min(kv_capacities(SEP, models)) == kv_capacity_tokens(SEP, models) == 299_356
    shared = latency_models(COLOC, "a100-80g", R2R)
    assert kv_capacities(COLOC, shared) == (kv_capacity_tokens(COLOC, shared),) * 2


def test_memory_bounds_concurrency_at_capacity_over_the_resident_footprint_with_its_margin():
    # 32B at tp 2 holds 299,356 tokens; 1,000 + 2,000 / 2 = 2,000 tokens a request on average (equal lengths: no
    # length bias), each resident's KV uniform over 1,000..3,000 (std 2,000 / sqrt(12) = 577.35). N fit when
    # 2,000 N + 1.645 x 577.35 sqrt(N) <= 299,356: 143 (297,357), not 144 (299,397). Endless requests of 10,000
    # tokens: 29 fit, so N = 64 is skipped and N = 16 is solved.
    cfg = PlanConfig(
        "a100-80g", 8, R2R, P, C, concurrencies=(16, 64), thresholds=((1, 1),), context_tokens=10_000,
        workload=lengths(1000, 2000),
    )  # fmt: skip
    row = closed_loop(cfg, SEP)
    assert [p["concurrency"] for p in row["points"]] == [16]
    bound = row["memory_bound"]
    assert (bound["concurrency"], bound["bound_model"], bound["footprint_tokens"]) == (143, "large", 2000)
    assert bound["binds"] is False and bound["throughput_tok_s"] > 0 and bound["evaluator"] == "sim"
    assert batch_cap(cfg, kv_capacities(SEP, latency_models(SEP, "a100-80g", R2R)), lengths(1000, 2000)) == 143
    two = closed_loop(PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(512,), thresholds=((1, 1),),
                                 workload=lengths(1000, 2000)), Placement((1, 2), 2, False))  # fmt: skip
    assert two["memory_bound"]["concurrency"] == 286 and two["memory_bound"]["binds"] is True  # 143 per pipeline


def test_the_bound_is_simulated_with_exactly_that_pool():
    # Co-located on one A100: 10,042 tokens for both models; 2,000 tokens a request: 4 fit with the margin
    # (8,000 + 1.645 x 577.35 x 2 = 9,899), not 5 (10,000 + 2,124).
    cfg = PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(4,), thresholds=((1, 1),), context_tokens=1000,
                     workload=lengths(1000, 2000), sim_tokens=2000)  # fmt: skip
    row = closed_loop(cfg, COLOC)
    assert row["memory_bound"]["concurrency"] == 4
    sims = confirm_memory_bound(cfg, {**row, "placement": COLOC})
    assert set(sims) == {"cost", "admission-limit"} and min(sims.values()) > 0


def test_resident_requests_are_length_biased_and_their_spread_is_worked_by_hand():
    from trsim.lengths import LengthDist
    from trsim.plan_memory import length_moments

    equal = length_moments(lengths(100, 600))
    assert (equal.mean_prompt, equal.mean_output, equal.output_spread) == (100, 600, 1.0)
    assert equal.footprint_std == pytest.approx(600 / math.sqrt(12), rel=1e-9)  # position uniform over 600
    # Outputs of 100 or 900 tokens, half each: mean 500, E[L^2] = 410,000, spread 1.64. A resident is a 900-token
    # request 90% of the time: mean KV 0.1 x 50 + 0.9 x 450 = 410 = E[L^2] / (2 E[L]), plus a 1-token prompt.
    two = WorkloadConfig(prompt_tokens=constant(1), output_tokens=LengthDist("empirical", values=(100, 900)))
    mo = length_moments(two, num=40_000)
    assert mo.mean_output == pytest.approx(500, rel=0.02) and mo.output_spread == pytest.approx(1.64, rel=0.02)
    demand = KVDemand((None,), mo.mean_prompt, mo.mean_output, mo.output_spread)
    assert demand.footprint_tokens == pytest.approx(411, rel=0.02)


def test_equal_outputs_too_long_to_sum_exactly_still_have_a_spread_of_one():
    """The ``endless`` preset (outputs of 10^15 tokens): summing their squares rounded E[L^2] / E[L]^2 just below 1,
    and ``plan --workload endless`` stopped with an error about ``kv.spread``, an input nobody gave."""
    from trsim.plan_memory import length_moments, resident_demand

    mo = length_moments(lengths(16, 10**15))
    assert mo.output_spread == 1.0
    assert resident_demand((24_698, None), lengths(16, 10**15)).max_fitting(24_698) == 0  # none fits: said so


def test_a_placement_ranks_by_what_its_memory_bound_lets_it_hold():
    from trsim.plan import _best_point

    place = Placement(tp=(1, 1), colocated=False, replicas=1)
    points = [{"concurrency": n, "thresholds": [1, 1], "evaluator": "chain", "throughput_tok_s": 10.0 * n}
              for n in (64, 128, 256)]  # fmt: skip
    bound = {"concurrency": 168, "throughput_tok_s": 900.0, "evaluator": "sim", "binds": True,
             "kv_capacity_tokens": [1000, 2000], "footprint_tokens": 3177.0}  # fmt: skip
    row = {"placement": place, "points": points, "memory_bound": bound, "kv_capacity_tokens": 3000}
    assert _best_point(row, 0.0)["concurrency"] == 128  # 256 does not fit; 128 does
    low = {**bound, "concurrency": 32}  # below every searched N: the bound itself is the placement's point
    best = _best_point({**row, "memory_bound": low}, 0.0)
    assert (best["concurrency"], best["throughput_tok_s"], best["at_memory_bound"]) == (32, 900.0, True)
    free = {**bound, "binds": False}
    assert _best_point({**row, "memory_bound": free}, 0.0)["concurrency"] == 256
