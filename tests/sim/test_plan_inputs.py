"""The planner on measured inputs: profiles in place of the roofline's step latency, and the stack's costs."""

import json

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.errors import ConfigError
from trsim.latency import ConstantModel
from trsim.lengths import constant
from trsim.placement import Placement, kv_capacity_tokens
from trsim.plan import PlanConfig
from trsim.plan_alone import alone_config
from trsim.plan_inputs import MeasuredProfile, ProfiledRoofline, plan_models, with_stack
from trsim.plan_open import max_rate
from trsim.workload import WorkloadConfig

runner = CliRunner()
MODELS = {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}
P = ((0.65, 0.35), (1.0, 0.0))
C = ((1.0, 0.0), (1.0, 0.0))
SLOW = (MeasuredProfile("s", 1, ConstantModel(0.006), "a"), MeasuredProfile("l", 1, ConstantModel(0.028), "b"))
SHORT = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))


def test_a_profile_replaces_the_step_latency_where_name_and_tp_match_and_memory_stays():
    alone = Placement((1, 1), 1, False)
    roofline = plan_models(alone, "h100-sxm", MODELS, "bf16", ())
    measured = plan_models(alone, "h100-sxm", MODELS, "bf16", SLOW)
    assert all(isinstance(m, ProfiledRoofline) for m in measured)
    assert [m.predict(4, 4096, 0) for m in measured] == [0.006, 0.028]
    assert kv_capacity_tokens(alone, measured) == kv_capacity_tokens(alone, roofline)  # bytes are the roofline's
    other_tp = plan_models(Placement((1, 2), 1, False), "h100-sxm", MODELS, "bf16", SLOW)
    assert isinstance(other_tp[0], ProfiledRoofline) and not isinstance(other_tp[1], ProfiledRoofline)
    shared = plan_models(Placement((1, 1), 1, True), "h100-sxm", MODELS, "bf16", SLOW)
    assert not any(isinstance(m, ProfiledRoofline) for m in shared)  # measured alone, not under contention


def test_the_planners_capacity_follows_the_profiles_and_the_stack():
    cfg = PlanConfig("h100-sxm", 1, MODELS, P, C, workload=SHORT, slo_tpot_ms=30.0, slo_ttft_ms=500.0,
                     open_run_s=4.0, bisection_steps=4)  # fmt: skip
    pipeline = Placement((1, 1), 1, False)
    measured = PlanConfig(**{**cfg.__dict__, "profiles": SLOW})
    # Constant 6 / 28 ms steps: a token costs 6 ms on the small model, 35% of them 6 + 28 ms: TPOT p99 far
    # above the roofline's few ms, so the same target admits far less.
    fast, slow = max_rate(cfg, pipeline, 40.0), max_rate(measured, pipeline, 40.0)
    assert 0 < slow["max_rate_rps"] < fast["max_rate_rps"]
    assert slow["at_max"]["tpot_p99_ms"] > 6.0
    costly = PlanConfig(**{**measured.__dict__, "stack": {"host_overhead_s": (0.004, 0.004)}})
    assert max_rate(costly, pipeline, 40.0)["max_rate_rps"] < slow["max_rate_rps"]


def test_stack_costs_name_simulator_fields_and_the_large_model_alone_keeps_its_own():
    cfg = PlanConfig("h100-sxm", 1, MODELS, P, C, stack={"host_overhead_s": (0.001, 0.002), "delivery_delay_s": 0.001})
    assert alone_config(cfg).stack == {"host_overhead_s": (0.002,), "delivery_delay_s": 0.001}
    with pytest.raises(ConfigError, match="unknown cost fields"):
        with_stack(None, {"think_time_s": 1.0})  # type: ignore[arg-type]


def _stack_file(tmp_path):
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"host_gap_s": [0.0003, 0.0005], "handoff_transit_s": [0.0002, 0.0001],
                                "per_request_s": [0.00002, 0.00001], "delivery_s": 0.001}))  # fmt: skip
    return path


def test_plan_cli_takes_profiles_and_a_stack_and_records_them(tmp_path):
    profile = "docs/bench-emulated/memory/profiles/small.json"
    result = runner.invoke(app, ["plan", "--hardware", "a100-80g", "--gpus", "4", "--pair", "r2r-qwen-1.5b-32b",
                                 "--concurrency", "8", "--thresholds", "1,1", "--open-loop-top", "0",
                                 "--no-large-alone", "--profile", f"small:1={profile}", "--stack",
                                 str(_stack_file(tmp_path)), "--workers", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert config["profiles"] == [{"model": "small", "tp": 1, "source": profile}]
    assert config["stack"]["host_overhead_per_request_s"] == [0.00002, 0.00001]
    assert config["stack"]["delivery_delay_s"] == 0.001


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--profile", "small=x.json"], "expected NAME:TP=PROFILE.json"),
        (["--profile", "small:1=/nonexistent.json"], "is not a file"),
        (["--profile", "huge:1=README.md"], "not a latency profile"),
        (["--profile", "huge:1=docs/bench-emulated/memory/profiles/small.json"], "no model 'huge'"),
        (["--stack", "/nonexistent.json"], "--stack"),
    ],
)
def test_bad_measured_inputs_are_one_line_and_exit_2(extra, message):
    result = runner.invoke(app, ["plan", "--pair", "r2r-qwen-1.5b-32b", "--open-loop-top", "0", *extra])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
