"""Placements and `tokenrouter plan` / `tokenrouter latency`: memory fit, decomposition, JSON, bad input."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trserve.config import ServeConfig
from trsim.lengths import constant
from trsim.placement import Placement, kv_capacity_tokens, latency_models, placements
from trsim.plan import PlanConfig, closed_loop, default_thresholds, feasible, run_plan
from trsim.plan_open import batch_caps, keeps_up, max_rate, open_run, per_pipeline
from trsim.workload import WorkloadConfig

runner = CliRunner()
R2R = {"small": "DeepSeek-R1-Distill-Qwen-1.5B", "large": "DeepSeek-R1-Distill-Qwen-32B"}
P = ((0.65, 0.35), (1.0, 0.0))
C = ((1.0, 0.0), (1.0, 0.0))


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_placements_use_at_most_the_gpus_given():
    found = list(placements(8, 2))
    assert all(p.num_gpus <= 8 for p in found)
    assert Placement((2, 2), 2, False) in found and Placement((4, 4), 2, True) in found
    assert Placement((4, 4), 2, False) not in found


def test_32b_does_not_fit_one_l40s_and_colocation_splits_memory():
    cfg = PlanConfig("l40s", 8, R2R, P, C)
    assert all(p.tp[1] >= 2 for p in feasible(cfg))
    sep, coloc = Placement((2, 2), 1, False), Placement((2, 2), 1, True)
    assert kv_capacity_tokens(coloc, latency_models(coloc, "a100-80g", R2R)) < kv_capacity_tokens(
        sep, latency_models(sep, "a100-80g", R2R)
    )


def test_no_placement_splits_a_models_heads_unevenly():
    # vLLM will not start the 1.5B (12 attention heads) at tp 8; the planner listed 1x coloc tp8 on 8 GPUs
    found = feasible(PlanConfig("a100-80g", 16, R2R, P, C))
    assert Placement((4, 8), 1, False) in found and Placement((4, 4), 2, True) in found
    assert not any(p.tp[0] == 8 for p in found)
    result = run("latency", "--hardware", "a100-80g", "--shape", R2R["small"], "--tp", "8")
    assert result.exit_code == 2 and "--tp" in result.output and len(result.output.strip().splitlines()) == 1


def test_colocated_models_run_slower_than_alone():
    alone = latency_models(Placement((2, 2), 1, False), "a100-80g", R2R)
    shared = latency_models(Placement((2, 2), 1, True), "a100-80g", R2R)
    assert all(s.predict(8, 8192, 0) > a.predict(8, 8192, 0) for s, a in zip(shared, alone, strict=True))


def test_replicas_multiply_one_pipelines_throughput():
    cfg = PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(8,), thresholds=((1, 1),))
    one = closed_loop(cfg, Placement((1, 2), 1, False))["points"][0]["throughput_tok_s"]
    two = closed_loop(PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(16,), thresholds=((1, 1),)),
                      Placement((1, 2), 2, False))["points"][0]["throughput_tok_s"]  # fmt: skip
    assert two == pytest.approx(2 * one)


def test_replicas_that_do_not_divide_n_carry_the_servers_uneven_shares():
    # Before: a placement ran only the N its replicas divide, so 3, 5, 6 or 7 replicas never ran the default N
    # (8, 16, 32, 64) and were left out of every plan unsaid (on 3 GPUs: 3x coloc tp1, the 32B alone 3x tp1).
    def at(n: int, replicas: int) -> list[dict]:
        cfg = PlanConfig("a100-80g", 8, R2R, P, C, concurrencies=(n,), thresholds=((1, 1),))
        return closed_loop(cfg, Placement((1, 2), replicas, False))["points"]

    three = at(8, 3)  # least-loaded pinning: 3, 3 and 2 requests
    assert [x["concurrency"] for x in three] == [8]
    one_of_3, one_of_2 = at(3, 1)[0]["throughput_tok_s"], at(2, 1)[0]["throughput_tok_s"]
    assert three[0]["throughput_tok_s"] == pytest.approx(2 * one_of_3 + one_of_2)


def test_max_rate_meets_the_slo_and_the_next_rate_up_does_not():
    short = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))
    cfg = PlanConfig("h100-sxm", 2, {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}, P, C, workload=short, slo_tpot_ms=15.0,
                     slo_ttft_ms=200.0, open_run_s=2.0, bisection_steps=3)  # fmt: skip
    found = max_rate(cfg, Placement((1, 1), 2, False), guess_rps=20.0)
    lo, hi = found["rate_bracket_rps"]
    assert found["max_rate_rps"] == lo > 0 and hi > lo
    assert found["at_max"]["meets_slo"] and found["at_max"]["tpot_p99_ms"] <= 15.0
    assert found["at_max"]["rate_rps"] * 2 == pytest.approx(lo)  # two replicas, each at the bisected rate


def test_the_servers_admission_limit_lowers_capacity_and_is_split_over_replicas():
    # Each pipeline admits at most max_active // replicas requests; beyond them arrivals queue, so TTFT grows at
    # rates the unlimited pipeline still meets.
    short = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))
    cfg = PlanConfig("h100-sxm", 2, {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}, P, C, workload=short, slo_tpot_ms=None,
                     slo_ttft_ms=200.0, open_run_s=2.0, bisection_steps=3, max_active=None)  # fmt: skip
    two = Placement((1, 1), 2, False)
    free, capped = max_rate(cfg, two, guess_rps=20.0), max_rate(replace(cfg, max_active=4), two, guess_rps=20.0)
    assert free["max_active_per_pipeline"] is None and capped["max_active_per_pipeline"] == 2
    assert capped["max_rate_rps"] < free["max_rate_rps"]
    assert per_pipeline(5, 2) == 2 and per_pipeline(None, 2) is None


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_the_planners_default_admission_is_the_servers_for_every_replica_count(replicas):
    """Left out, the plan admits what a server of ``replicas`` copies of each model admits with its defaults."""
    models = [{"name": name, "emulated": {"latency_ms": 1.0}, "replicas": replicas} for name in ("small", "large")]
    served = ServeConfig.model_validate({"backend": "emulated", "models": models}).server.max_active_requests
    limit = PlanConfig("a100-80g", 8, R2R, P, C).max_active
    assert per_pipeline(limit, replicas) * replicas == served


@pytest.mark.parametrize("limit", [2, "server-default"])
def test_a_system_wide_limit_is_split_over_each_placements_replicas_and_the_default_is_per_pipeline(limit):
    """Given as a number, the limit is the whole server's, so two replicas admit half of it each; the server's
    default admits 64 a pipeline whatever the replicas, so r pipelines carry r x one pipeline's rate."""
    short = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))
    cfg = PlanConfig("h100-sxm", 2, {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}, P, C, concurrencies=(4,),
                     thresholds=((1, 1),), workload=short, slo_tpot_ms=None, slo_ttft_ms=200.0, open_run_s=2.0,
                     bisection_steps=3, max_active=limit, open_loop_top=10, compare_alone=False)  # fmt: skip
    rows = {(p["label"]): p for p in run_plan(cfg)["placements"]}
    one, two = rows["1x coloc tp1"], rows["2x coloc tp1"]
    if limit == 2:
        assert (one["max_active_per_pipeline"], two["max_active_per_pipeline"]) == (2, 1)
    else:
        assert one["max_active_per_pipeline"] == two["max_active_per_pipeline"] == 64
        assert two["max_rate_rps"] == pytest.approx(2 * one["max_rate_rps"])


def test_a_tpot_only_target_does_not_pass_an_overloaded_pipeline():
    # Admission-limited, the overload waits in the queue: TPOT stays low and the finished requests' latencies grow
    # with the run, so Little's law on them passed every rate (3,730 req/s planned where the pipeline finishes ~23).
    short = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))
    cfg = PlanConfig("h100-sxm", 2, {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}, P, C, workload=short, slo_tpot_ms=15.0,
                     slo_ttft_ms=None, open_run_s=4.0, bisection_steps=3, max_active=4)  # fmt: skip
    one = Placement((1, 1), 1, False)
    models = latency_models(one, cfg.hardware, cfg.models)
    flooded = open_run(cfg, models, batch_caps(cfg, one, models), 2000.0)
    assert not flooded["meets_slo"] and flooded["tpot_p99_ms"] <= 15.0
    found = max_rate(cfg, one, guess_rps=20.0)
    assert found["upper_failed"] and found["max_rate_rps"] < 3 * flooded["num_finished"] / cfg.open_run_s


def test_keeps_up_compares_the_second_halfs_departures_with_its_arrivals():
    steady = [k / 10 for k in range(1, 100)]  # 10 req/s finishing over a 10 s run: 50 in its second half
    assert keeps_up(10.0, steady, 10.0)
    assert not keeps_up(30.0, steady, 10.0)  # 150 expected, 50 finished
    assert keeps_up(0.5, [], 10.0)  # a handful of arrivals: within the slack


def test_latency_command_prints_step_ms_and_bound():
    result = run("latency", "--hardware", "a100-80g", "--shape", "DeepSeek-R1-Distill-Qwen-32B", "--tp", "1",
                 "--batch", "1", "--context", "1024", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["bound"] == "memory" and out["step_ms"] > out["floor_ms"] > 30


def test_plan_writes_placements_best_json_and_plot(tmp_path):
    result = run("plan", "--hardware", "h100-sxm", "--gpus", "2", "--models", "small=Qwen3-0.6B,large=Qwen3-4B",
                 "--concurrency", "4,8", "--thresholds", "1,1;2,1", "--open-loop-top", "0",
                 "--workers", "1", "--out", tmp_path, "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert (tmp_path / "plan.png").stat().st_size > 0 and json.loads((tmp_path / "plan.json").read_text())
    first = plan["placements"][0]
    for key in ("gpus", "tp", "replicas", "threshold"):
        assert key in first["models"]["small"]
    for key in ("thresholds", "concurrency", "throughput_tok_s", "throughput_per_gpu_tok_s", "max_rate_rps"):
        assert key in first
    assert first["max_rate_rps"] is None and plan["best"]["throughput"] == first["label"]
    assert any("replicas" in a for a in plan["assumptions"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--hardware", "tpu"], "unknown hardware 'tpu'"),
        (["plan", "--models", "small=Qwen3-0.6B,large=Nope"], "unknown shape 'Nope'"),
        (["plan", "--gpus", "0"], "--gpus: one node's GPUs, 1..64"),
        (["plan", "--thresholds", "all"], "give explicit candidates"),
        (["plan", "--hardware", "cpu-2core"], "no 'bf16' peak"),
        (["plan", "--max-active-requests", "-1"], "--max-active-requests: must be >= 1"),
        (["plan", "-N", "8,16,8"], "--concurrency: a value is given twice: [8, 16, 8]"),
        (["plan", "--thresholds", "1,1;2,1;1,1"], "--thresholds: a value is given twice"),
        (["latency", "--hardware", "a100-80g", "--shape", "Qwen3-8B", "--batch", "0"], "--batch: must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run(*args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("option", [["--slo-tpot-ms", "30"], ["--slo-ttft-ms", "0"], ["--open-run-s", "60"],
                                    ["--max-active-requests", "128"]])  # fmt: skip
def test_open_loop_options_without_the_open_loop_are_refused(option):
    result = run("plan", "--open-loop-top", "0", *option)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{option[0]}: sets the open loop, which --open-loop-top 0 turns off" in result.stderr


def test_the_closed_loops_simulator_measures_past_the_first_hand_off_wave():
    # 1,520 endless requests on one co-located tp8 pipeline: every request's first visit to the 32B prefills its
    # context there, a wave over its first few tokens. After a 5k-token warm-up (3 a request) the window sat inside
    # the wave (at 1,522 requests 396 tok/s, against 8,707 at 768); past it, throughput at saturation no longer
    # falls with N. (The 1.5B's 12 heads do not split over tp 8, so Qwen3-0.6B stands in: the same KV per GPU.)
    pair = {"small": "Qwen3-0.6B", "large": R2R["large"]}
    cfg = PlanConfig("a100-80g", 8, pair, P, C, concurrencies=(768, 1520), thresholds=((1, 1),), context_tokens=861)
    points = closed_loop(cfg, Placement((8, 8), 1, True))["points"]
    assert [p["concurrency"] for p in points] == [768, 1520] and {p["evaluator"] for p in points} == {"sim"}
    assert points[1]["throughput_tok_s"] > 0.9 * points[0]["throughput_tok_s"]


def test_the_chain_solves_cpu_steps_on_a_coarser_grid_and_gpu_steps_on_1_ms(monkeypatch):
    # cpu-2core steps of 0.1-1.2 s on the 1 ms grid: the memory bound's 19-request chain ran for hours
    import trsim.plan as plan

    grids, real = [], plan.ThroughputModel
    monkeypatch.setattr(
        plan, "ThroughputModel", lambda *a, quantum_s: grids.append(quantum_s) or real(*a, quantum_s=quantum_s)
    )
    coloc = Placement((1, 1), 1, True)
    cpu = PlanConfig("cpu-2core", 1, {"s": "Qwen3-0.6B", "l": "Qwen3-1.7B"}, P, C, dtype="fp32")
    plan._pipeline_throughput(cpu, latency_models(coloc, cpu.hardware, cpu.models, "fp32"), 4, (1, 1))
    gpu = PlanConfig("a100-80g", 1, R2R, P, C)  # the slowest GPU pipeline the committed plans solve
    plan._pipeline_throughput(gpu, latency_models(coloc, gpu.hardware, R2R), 24, (1, 1))
    assert grids[0] > 3 * gpu.quantum_s and grids[1] == gpu.quantum_s == 1e-3


def test_max_rate_keeps_raising_a_low_guess_until_a_rate_fails():
    short = WorkloadConfig(prompt_tokens=constant(32), output_tokens=constant(24))
    cfg = PlanConfig("h100-sxm", 1, {"s": "Qwen3-0.6B", "l": "Qwen3-4B"}, P, C, workload=short, slo_tpot_ms=15.0,
                     slo_ttft_ms=200.0, open_run_s=2.0, bisection_steps=3)  # fmt: skip
    one = Placement((1, 1), 1, True)
    near = max_rate(cfg, one, guess_rps=20.0)
    low = max_rate(cfg, one, guess_rps=near["max_rate_rps"] / 20)  # three raises reached 3.4x the guess only
    assert near["upper_failed"] and low["upper_failed"]
    assert low["max_rate_rps"] > 0.5 * near["max_rate_rps"]


def test_an_unreachable_target_names_no_capacity(tmp_path):
    result = run("plan", "--hardware", "h100-sxm", "--gpus", "1", "--models", "small=Qwen3-0.6B,large=Qwen3-4B",
                 "--concurrency", "4", "--thresholds", "1,1", "--slo-tpot-ms", "0.5", "--open-run-s", "2",
                 "--workers", "1", "--out", tmp_path)  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    rated = plan["placements"] + plan["large_alone"]["placements"]
    assert all(p["max_rate_rps"] == 0 and p["at_max"] is None and p["upper_failed"] for p in rated)
    assert plan["best"]["max_rate"] is None
    assert "Poisson capacity none: no rate tried meets the latency targets" in " ".join(result.stdout.split())
    assert "│ none │" in result.stdout and "0.00" not in result.stdout


def test_three_models_without_thresholds_plan_the_default_candidates_for_three():
    """The default candidates follow the number of models (it was two models' '1,1;...', refused for three)."""
    assert default_thresholds(2) == [(1, 1), (2, 1), (4, 1), (1, 2)]
    assert default_thresholds(3) == [(1, 1, 1), (2, 1, 1), (4, 1, 1), (1, 1, 2)]
    result = run("plan", "--hardware", "h100-sxm", "--gpus", "3", "--models", "a=Qwen3-0.6B,b=Qwen3-1.7B,c=Qwen3-4B",
                 "--P", "0.8,0.1,0.1;0.5,0.5,0;0.5,0,0.5", "--C", "1,0,0;1,0,0;1,0,0", "--concurrency", "4",
                 "--open-loop-top", "0", "--no-large-alone", "--workers", "1", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    planned = {tuple(p["thresholds"]) for row in json.loads(result.stdout)["placements"] for p in row["points"]}
    assert planned == set(default_thresholds(3))
