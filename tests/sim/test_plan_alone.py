"""`tokenrouter plan`'s "when not to route": the large-model share of a Markov router worked by hand, the share
set by scaling, the break-even bisection, the large model alone on the chain's grid, and the CLI's JSON."""

import json

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trsim.placement import Placement
from trsim.plan import PlanConfig, _pipeline_throughput, closed_loop
from trsim.plan_alone import alone_config, routed_at_share, verdict
from trsim.plan_share import break_even, large_share, with_large_share
from trsim.roofline import RooflineModel

R2R = {"small": "DeepSeek-R1-Distill-Qwen-1.5B", "large": "DeepSeek-R1-Distill-Qwen-32B"}
P = ((0.65, 0.35), (1.0, 0.0))
C = ((1.0, 0.0), (1.0, 0.0))


def chain_tok_s(model, n, context=1024, quantum=1e-3):
    """n tokens per step, the step rounded to the chain's grid: what a one-model chain gives."""
    return n / (round(model.predict(n, n * context, 0) / quantum) * quantum)


def test_r2r_large_share_is_its_handoff_probability():
    # pi = (1/1.35, 0.35/1.35); commits: small->small 0.65 pi_s, large->small pi_l; share = 0.35 / (0.65 + 0.35)
    assert large_share(P, C) == pytest.approx(0.35)
    # every step commits one token: the share is the large model's stationary probability 0.1 / (0.1 + 0.5)
    assert large_share(((0.9, 0.1), (0.5, 0.5)), ((1, 1), (1, 1))) == pytest.approx(1 / 6)


def test_a_chosen_share_scales_the_handoff_and_keeps_the_large_models_row():
    at = with_large_share(P, C, 0.2)
    assert at[0] == pytest.approx((0.8, 0.2)) and at[1] == (1.0, 0.0)
    assert large_share(at, C) == pytest.approx(0.2)
    assert with_large_share(P, C, 0.0)[0] == (1.0, 0.0)
    # odds x k: 0.1 -> 0.1k / (0.1k + 0.9), 0.5 stays; share 1/3 needs pi_l = 1/3, so p = 0.25 and k = 3
    odds = with_large_share(((0.9, 0.1), (0.5, 0.5)), ((1, 1), (1, 1)), 1 / 3)
    assert odds[0] == pytest.approx((0.75, 0.25)) and odds[1] == (0.5, 0.5)


def test_break_even_bisects_where_routed_falls_to_alone():
    assert break_even(lambda s: 100 - 200 * s, 50.0, steps=20) == pytest.approx(0.25, abs=1e-5)
    assert break_even(lambda s: 40 - s, 50.0) is None  # loses with no large-model tokens at all
    assert break_even(lambda s: 60 - s, 50.0) == 1.0  # wins at every share


def test_large_alone_is_one_model_on_the_chain_grid():
    cfg = PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(8, 16), thresholds=((1, 1),))
    solo = alone_config(cfg)
    assert solo.models == {"large": R2R["large"]} and solo.P == ((1.0,),) and solo.colocation is False
    row = closed_loop(solo, Placement((2,), 2, False))
    model = RooflineModel("a100-80g", R2R["large"], 2)
    # N requests over two tp-2 replicas: N / 2 each, N / 2 tokens a step of 26-28 ms, twice
    assert [p["concurrency"] for p in row["points"]] == [8, 16]
    assert [p["throughput_tok_s"] for p in row["points"]] == pytest.approx([2 * chain_tok_s(model, n) for n in (4, 8)])


def test_routed_at_the_pairs_share_is_the_plan_and_at_zero_the_small_model():
    cfg = PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(8,), thresholds=((1, 1),))
    sep = Placement((1, 2), 1, False)
    planned = closed_loop(cfg, sep)["points"][0]["throughput_tok_s"]
    assert routed_at_share(cfg, 8, [(sep, (1, 1))], 0.35, _pipeline_throughput) == pytest.approx(planned, rel=1e-6)
    small = RooflineModel("a100-80g", R2R["small"], 1)
    assert routed_at_share(cfg, 8, [(sep, (1, 1))], 0.0, _pipeline_throughput) == pytest.approx(chain_tok_s(small, 8))


def test_verdict_names_where_routing_pays_and_the_break_even_share():
    cells = [
        {"concurrency": 8, "routing_pays": True, "break_even_share": 0.5},
        {"concurrency": 64, "routing_pays": False, "break_even_share": None},
    ]
    text = verdict(0.35, cells)
    assert "routing pays at N = [8] and loses at N = [64]" in text
    assert "N = 8: 0.500" in text and "N = 64: 0 (loses even with no large-model tokens)" in text


def test_plan_json_ranks_the_large_model_alone_beside_the_routed_plans():
    result = CliRunner().invoke(app, ["plan", "--hardware", "h100-sxm", "--gpus", "2", "--models",
                                      "small=Qwen3-0.6B,large=Qwen3-4B", "--concurrency", "4,8", "--thresholds",
                                      "1,1", "--open-loop-top", "0", "--workers", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    alone = plan["large_alone"]["placements"]
    assert plan["large_alone"]["shape"] == "Qwen3-4B" and {a["label"] for a in alone} >= {"large alone 1x tp1"}
    assert {r["system"] for r in plan["ranking"]} == {"routed", "alone"}
    assert len(plan["ranking"]) == len(plan["placements"]) + len(alone)
    tok_s = [r["throughput_tok_s"] for r in plan["ranking"]]
    assert tok_s == sorted(tok_s, reverse=True)
    for cell in plan["routing_pays"]["by_concurrency"]:
        assert cell["routing_pays"] == (cell["routed_tok_s"] > cell["alone_tok_s"])
        assert cell["routed_over_alone"] == pytest.approx(cell["routed_tok_s"] / cell["alone_tok_s"])
        share = cell["break_even_share"]
        assert share is None or cell["routing_pays"] == (share > plan["routing_pays"]["pair_large_share"])
    assert "routing_pays" not in json.loads(
        CliRunner().invoke(app, ["plan", "--hardware", "h100-sxm", "--gpus", "1", "--models",
                                 "small=Qwen3-0.6B,large=Qwen3-4B", "--concurrency", "4", "--thresholds", "1,1",
                                 "--open-loop-top", "0", "--workers", "1", "--no-large-alone", "--json"]).stdout
    )  # fmt: skip


def test_where_the_pair_fits_no_placement_the_large_model_alone_is_still_planned():
    # Qwen3-8B and Qwen3-32B do not fit one A100-80G together; Qwen3-32B alone does (plan said only 'no placement').
    result = CliRunner().invoke(app, ["plan", "--gpus", "1", "--models", "small=Qwen3-8B,large=Qwen3-32B",
                                      "--concurrency", "8", "--thresholds", "1,1", "--open-loop-top", "0",
                                      "--workers", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["placements"] == [] and plan["best"]["throughput"] is None
    ranking = plan["ranking"]
    assert [r["label"] for r in ranking] == ["large alone 1x tp1"] and ranking[0]["throughput_tok_s"] > 0
    assert plan["routing_pays"]["verdict"].endswith("fits 1 a100-80g: only the large model alone is planned")
    table = CliRunner().invoke(app, ["plan", "--gpus", "1", "--models",
                                     "small=Qwen3-8B,large=Qwen3-32B", "-N", "8", "--thresholds", "1,1",
                                     "--open-loop-top", "0", "--workers", "1"], terminal_width=200)  # fmt: skip
    assert table.exit_code == 0 and "large alone 1x tp1" in table.output and "only the large model" in table.output


def test_a_context_no_placement_holds_is_an_error_of_context_not_of_gpus():
    # The weights fit 3 A100s; one request of 10M tokens' KV does not (the error named --gpus)
    result = CliRunner().invoke(app, ["plan", "--gpus", "3", "--context", "10000000", "--open-loop-top", "0"])
    assert result.exit_code == 2 and result.output.strip().startswith("error: --context: ")
    assert len(result.output.strip().splitlines()) == 1 and "10000000 tokens" in result.output
