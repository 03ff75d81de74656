"""Baselines in the same simulator: lockstep, per-token standard serving, LLM-only, B = 1."""

from dataclasses import replace

import pytest

from trcore import ConfigError
from trsim import BASELINES, PerTokenConfig, apply_baseline, simulate
from trsim.baselines import PerTokenLatency
from trsim.latency import ConstantModel

#: Recompute priced explicitly: the constant latency models of these tests have no extend term.
PRICED = PerTokenConfig(recompute_s_per_token=2e-5)


def test_every_baseline_runs_and_unknown_names_list_valid_ones(r2r):
    config = r2r((2, 1), workload="short-reasoning", per_token=PRICED)
    for name in BASELINES:
        assert simulate(apply_baseline(config, name), tokens=3000).committed_tokens >= 3000
    with pytest.raises(ConfigError, match="valid: tokenrouter, b1, lockstep"):
        apply_baseline(config, "vllm")


def test_lockstep_steps_the_whole_batch_on_the_entry_model(r2r):
    result = simulate(apply_baseline(r2r((1, 1), concurrency=8), "lockstep"), tokens=8000)
    assert set(result.models[0].batch_histogram) == {8}
    # every iteration: one SLM step, then one LLM step if anyone was routed (probability 1 - 0.65^8)
    iteration = 0.006 + (1 - 0.65**8) * 0.0279
    assert result.throughput_tok_s == pytest.approx(8 / iteration, rel=0.02)


def test_llm_only_runs_every_token_on_the_last_model(r2r):
    result = simulate(apply_baseline(r2r(concurrency=8), "llm-only"), tokens=4000)
    assert len(result.models) == 1 and result.handoffs_per_token == 0
    assert result.throughput_tok_s == pytest.approx(8 / 0.0279)


def test_b1_sets_every_threshold_to_one(r2r):
    assert apply_baseline(r2r((3, 2)), "b1").thresholds == (1, 1)


def test_per_token_pays_readmission_and_recomputation(r2r):
    config = r2r((1, 1), workload="short-reasoning")
    b1 = simulate(apply_baseline(config, "b1"), tokens=10_000)
    per_token = simulate(apply_baseline(replace(config, per_token=PRICED), "per-token"), tokens=10_000)
    assert per_token.throughput_tok_s < b1.throughput_tok_s
    assert per_token.latency_p50_s > b1.latency_p50_s
    # Recompute is what makes the difference grow: at 10x its price throughput falls further.
    dearer = PerTokenConfig(recompute_s_per_token=2e-4)
    worse = simulate(apply_baseline(replace(config, per_token=dearer), "per-token"), tokens=10_000)
    assert worse.throughput_tok_s < per_token.throughput_tok_s


def test_per_token_refuses_a_latency_model_that_cannot_price_recompute(r2r):
    with pytest.raises(ConfigError, match="recompute_s_per_token"):
        simulate(apply_baseline(r2r((1, 1)), "per-token"), tokens=100)


def test_per_token_latency_charges_the_partial_block():
    from trcore import Batch, RequestSpec
    from trcore.request import Request

    costs = PerTokenConfig(
        client_rtt_s=0.0, readmit_s=1e-3, prefix_match_s_per_block=1e-4, block_size=16, recompute_s_per_token=1e-5
    )
    inner = ConstantModel(0.01)
    latency = PerTokenLatency(inner, 0, costs)
    req = Request(RequestSpec("r", 10, 100), [1] * 40, [39, 0])  # 39 consumed: 2 full blocks cached, 7 recomputed
    batch = Batch(0, (req,), (1,), (40,), 0.0)
    assert latency(batch) == pytest.approx(0.01 + 1e-3 + 2 * 1e-4 + 7 * 1e-5)
