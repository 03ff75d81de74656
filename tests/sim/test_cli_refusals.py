"""`tokenrouter simulate` and `tokenrouter plan` on input that used to be ignored, misreported or never ended:
each is refused in one line with exit status 2, or now does what the flag says."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

runner = CliRunner()
MODELS = "models:\n  - {latency: {model: constant, ms: 5}}\n  - {latency: {model: constant, ms: 20}}\n"
ROUTER = "router: {program: markov, P: [[0.8, 0.2], [0.5, 0.5]], C: [[1, 0], [1, 0]]}\n"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def scenario(tmp_path: Path, body: str, models: str = MODELS) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text("name: t\n" + models + ROUTER + body)
    return path


def refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output, result.output


KV64 = MODELS.replace("ms: 5}}", "ms: 5}, kv: {tokens: 64}}").replace("ms: 20}}", "ms: 20}, kv: {tokens: 64}}")


@pytest.mark.parametrize("think", ["", ", think_time_s: 0.1"])
def test_requests_larger_than_every_cache_stop_with_the_cause(tmp_path, think):
    path = scenario(tmp_path, f"workload: {{prompt_tokens: 100, output_tokens: 50, concurrency: 4{think}}}\n", KV64)
    refused(run("simulate", "--scenario", path, "--tokens", 2000), "every request is larger than a whole KV cache")


def test_a_diurnal_day_runs_to_its_end_and_a_cut_phase_is_listed(tmp_path):
    day = "diurnal: {period_s: 8, steps: 4, concurrency: {low: 2, high: 8}}\n"
    path = scenario(tmp_path, "workload: {prompt_tokens: 8, output_tokens: 32, concurrency: 2}\n" + day)
    result = run("simulate", "--scenario", path, "--json")
    out = json.loads(result.stdout)
    assert out["simulated_s"] == pytest.approx(8.0) and len(out["phases"]) == 4
    cut = json.loads(run("simulate", "--scenario", path, "--json", "--tokens", out["committed_tokens"] // 2).stdout)
    assert cut["phases"][-1]["cut_short"] and len(cut["phases"]) < 4
    assert sum(p["committed_tokens"] for p in cut["phases"]) == cut["committed_tokens"]


@pytest.mark.parametrize(
    ("body", "args", "message"),
    [("workload: {concurrency: 4}\nphases: [{duration_s: 2, concurrency: 8}]\n", ["-N", "2"],
      "--concurrency: the scenario's phases set the concurrency"),
     ("workload: {arrival: poisson, rate_per_s: 5}\n", ["-N", "2"], "--concurrency: a poisson workload has no"),
     ("workload: {arrival: poisson, rate_per_s: 5}\nphases: [{duration_s: 2, concurrency: 8}]\n", [],
      "phases[0].concurrency: a poisson workload has no concurrency"),
     ("workload: {concurrency: 4}\nspill: lru\n", [], "spill: chooses what a full KV cache gives up"),
     ("workload: {concurrency: 4}\nphases: [{duration_s: .inf}]\n", [], "phases.0.duration_s"),
     ("workload: {concurrency: 4}\nbaseline: lockstep\n", ["--thresholds", "adaptive"], "baseline: adaptive tunes"),
     ("workload: {concurrency: 4, rate_per_s: 100}\n", [], "workload.rate_per_s: paces an open loop"),
     ("workload: {arrival: poisson, num_sessions: 4}\n", [], "workload.rate_per_s: an open loop (arrival: poisson)"),
     ("workload: {arrival: poisson, rate_per_s: 5, concurrency: 8}\n", [], "workload.concurrency: sets a closed")],
)  # fmt: skip
def test_scenario_settings_that_would_be_ignored_are_refused(tmp_path, body, args, message):
    refused(run("simulate", "--scenario", scenario(tmp_path, body), "--tokens", 500, *args), message)


def test_a_baseline_is_not_tuned_adaptively():
    refused(run("simulate", "--baseline", "b1", "--thresholds", "adaptive"), "--thresholds: adaptive tunes")


def test_a_workload_preset_gives_a_scenario_its_lengths_not_its_arrivals(tmp_path):
    path = scenario(tmp_path, "workload: {arrival: poisson, rate_per_s: 2, num_sessions: 5}\n")
    out = json.loads(run("simulate", "--scenario", path, "--workload", "short-reasoning", "--json").stdout)
    assert out["num_finished"] + out["num_unfinished"] == 5  # five sessions, not a closed loop of 16


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--slo-tpot-ms", "-5"], "--slo-tpot-ms: must be a finite number of ms >= 0"),
     (["--slo-ttft-ms", "nan"], "--slo-ttft-ms: must be a finite"),
     (["--models", "small=Qwen3-0.6B,small=Qwen3-4B"], "--models: each model needs its own name"),
     (["--models", "small=Qwen3-0.6B"], "--models: routing needs at least two models"),
     (["--hardware", "cpu-2core"], "--dtype: cpu-2core has no 'bf16' peak; valid: fp32"),
     (["--open-run-s", "0"], "--open-run-s: must be a finite number of seconds > 0"),
     (["--open-run-s", "1e12"], "--open-run-s: must be a finite number of seconds > 0, at most 1e+09"),
     (["--gpus", "1000"], "--gpus: one node's GPUs, 1..64"),
     (["--gpus", "2", "--open-loop-top", "0", "--no-large-alone", "-N", "8", "--thresholds", "100,1"],
      "--concurrency: no placement runs any of N = [8]"),
     (["--gpus", "1", "--models", "small=Qwen3-8B,large=Qwen3-32B", "--no-large-alone"],
      "fits 1 a100-80g; the large model alone fits: drop --no-large-alone"),
     (["--pair", "r2r-qwen-1.5b-32b", "--models", "a=Qwen3-0.6B,b=Qwen3-4B", "--P", "[[0.5, 0.5], [1, 0]]", "--C",
       "[[1, 1], [1, 1]]"], "--pair: gives the shapes, P and C, which --models, --P and --C all replace")],
)  # fmt: skip
def test_plan_refuses_targets_names_and_searches_with_no_answer(args, message):
    refused(run("plan", *args), message)


def test_plan_refuses_a_file_as_its_output_folder_before_searching(tmp_path):
    (tmp_path / "plan").write_text("")
    refused(run("plan", "--out", tmp_path / "plan"), "--out: ")


@pytest.mark.parametrize(
    ("latency", "unread"),
    [("{model: table, batch_sizes: [1, 64], ms: [6, 18], hardware: a100-80g, tp: 4}", "hardware, tp"),
     ("{model: constant, ms: 28, coefficients: {a: 1}}", "coefficients"),
     ("{model: quadratic, coefficients: {a: 0.01}, ms: 5}", "ms")],
)  # fmt: skip
def test_latency_keys_the_chosen_model_does_not_read_are_refused(tmp_path, latency, unread):
    models = f"models:\n  - {{latency: {latency}}}\n  - {{latency: {{model: constant, ms: 20}}}}\n"
    path = scenario(tmp_path, "workload: {concurrency: 4}\n", models)
    refused(run("simulate", "--scenario", path, "--tokens", 500), f"does not read {unread}")


def test_the_kv_flag_given_alone_is_the_one_named():
    refused(run("simulate", "--kv-max-seqs", 4), "--kv-max-seqs: needs --kv-tokens or --kv-blocks")


@pytest.mark.parametrize(
    ("phase", "field"),
    [({"duration_s": 0.0}, "phases[1].duration_s"), ({"duration_s": 5.0, "P": ((1.5, -0.5), (0.5, 0.5))},
     "phases[1].router.P"), ({"duration_s": 5.0, "P": ()}, "phases[1].router.P"),
     ({"duration_s": 5.0, "thresholds": (1,)}, "phases[1].thresholds")],
)  # fmt: skip
def test_a_bad_later_phase_is_refused_before_the_run(phase, field):
    from dataclasses import replace

    from trcore.errors import ConfigError
    from trsim.config import SimConfig
    from trsim.phases import Phase
    from trsim.scenario import load_scenario, scenario_config

    config = scenario_config(load_scenario("trsim/scenarios/adaptive-collapse.yaml"), "trsim/scenarios")
    with pytest.raises(ConfigError) as error:
        SimConfig(**{**config.__dict__, "phases": (config.phases[0], replace(Phase(1.0), **phase))})
    assert error.value.field == field


def test_a_tick_that_would_never_end_the_run_is_refused():
    from trcore.errors import ConfigError
    from trsim.adaptive import AdaptiveSimConfig

    for tick in (0.0, -1.0, 1e-9, float("nan")):
        with pytest.raises(ConfigError, match=r"adaptive\.tick_s"):
            AdaptiveSimConfig(tick_s=tick)


def test_a_tick_whose_window_holds_too_many_spans_is_refused(tmp_path):
    """Each decision re-reads the window's spans: window_s 60 at tick_s 0.001 took minutes per simulated second (the
    server refuses it for the same reason)."""
    body = "workload: {concurrency: 4}\nadaptive: {window_s: 60, tick_s: 0.001}\n"
    path = scenario(tmp_path, body)
    args = ("--thresholds", "adaptive", "--tokens", 500)
    refused(run("simulate", "--scenario", path, *args), "adaptive.tick_s: must be >= window_s / 1000 (0.06 s)")
    bound = scenario(tmp_path, body.replace("0.001", "0.06"))
    assert run("simulate", "--scenario", bound, *args).exit_code == 0


def test_threshold_tables_are_not_tuned_adaptively(tmp_path):
    """The controller tunes one vector and knows no tables: tables it never saw stayed in force until its first
    switch (a table that collapsed a phase was never switched away from)."""
    path = scenario(tmp_path, "workload: {concurrency: 8}\n", MODELS.replace("ms: 5}}", "ms: 5}, table: {4: 3}}"))
    refused(run("simulate", "--scenario", path, "--tokens", 500, "--thresholds", "adaptive"), "models.table: ")
    assert run("simulate", "--scenario", path, "--tokens", 500).exit_code == 0  # the tables alone run


def test_a_sweep_refuses_adaptive_thresholds_saying_where_they_run():
    result = run("sweep", "--scenario", "trsim/scenarios/adaptive-collapse.yaml", "--thresholds", "adaptive")
    refused(result, "--thresholds: a sweep runs fixed vectors")
    assert "simulate --thresholds adaptive" in result.output and "knobs apply" not in result.output


def test_thresholds_beside_a_baseline_that_sets_its_own_are_refused(tmp_path):
    refused(run("simulate", "--baseline", "b1", "--thresholds", "4,1"), "--thresholds: the b1 baseline sets its own")
    path = scenario(tmp_path, "workload: {concurrency: 4}\nbaseline: lockstep\n")
    refused(run("simulate", "--scenario", path, "--thresholds", "1,1"), "--thresholds: the lockstep baseline")
    out = tmp_path / "sweep"
    refused(run("sweep", "--scenario", path, "-N", 4, "--tokens", 500, "--out", out), "baseline sets its own")


def test_a_sweep_refuses_a_concurrency_its_scenario_sets(tmp_path):
    path = scenario(tmp_path, "workload: {concurrency: 4}\nphases: [{duration_s: 2, concurrency: 8}]\n")
    out = tmp_path / "sweep"
    refused(run("sweep", "--scenario", path, "-N", "4,8", "--tokens", 500, "--out", out), "--concurrency: ")


def test_the_large_model_alone_runs_a_scenario_whose_phases_route(tmp_path):
    body = "workload: {concurrency: 4}\nphases: [{duration_s: 2}, {duration_s: 2, router: {P: [[0.5, 0.5], [1, 0]]}}]\n"
    result = run("simulate", "--scenario", scenario(tmp_path, body), "--baseline", "llm-only", "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["phases"]) == 2


def test_an_open_loop_reports_no_concurrency(tmp_path):
    path = scenario(tmp_path, "workload: {arrival: poisson, rate_per_s: 5, num_sessions: 6}\n")
    assert json.loads(run("simulate", "--scenario", path, "--json").stdout)["concurrency"] is None


@pytest.mark.parametrize(
    ("args", "option"),
    [(["crossval", "--measure-s", "inf"], "--measure-s"), (["crossval", "--sim-s", "nan"], "--sim-s"),
     (["bench", "--drift-tolerance", "inf"], "--drift-tolerance")],
)  # fmt: skip
def test_an_infinite_window_or_step_is_refused_not_run_forever(args, option):
    refused(run(*args), f"{option}: must be a finite number > 0")


@pytest.mark.parametrize(
    ("args", "option"),
    [(["bench", "--rate", "5", "--warmup-s", "inf"], "--warmup-s"),
     (["bench", "-n", "1", "--window-s", "inf"], "--window-s"),
     (["crossval", "--rate", "5", "--warmup-s", "inf"], "--warmup-s"),
     (["crossval", "--warmup-s", "-1"], "--warmup-s")],
)  # fmt: skip
def test_an_infinite_warmup_or_window_is_refused_not_run_forever(args, option):
    # Before: bench drew Poisson arrivals over an infinite run (a loop that never ends, its memory growing) or ran a
    # window for ever, crossval likewise after its stack probe; a negative crossval warm-up named warmup_s.
    emulated = ["--config", "configs/emulated-r2r-a100.yaml", "--drift", "skip"]
    refused(run(*args, *emulated), f"{option}: must be a finite number of seconds >= ")


def test_a_bench_concurrency_beyond_what_the_models_hold_names_concurrency():
    # Before: 'server.max_active_requests (128) must not exceed ...', a field the user never set (the bench
    # raises it to the largest N).
    args = ["bench", "--config", "configs/emulated-r2r-a100.yaml", "--systems", "tokenrouter-b1", "-n", "4,128"]
    refused(run(*args), "--concurrency: N = 128 keeps 128 requests active; the config's models hold 64")
