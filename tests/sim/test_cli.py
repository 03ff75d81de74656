"""`tokenrouter simulate` and `tokenrouter sweep`: JSON output, files written, bad input exits 2 with one line."""

import json

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_simulate_json_has_the_headline_fields():
    result = run("simulate", "--tokens", "3000", "--concurrency", "4", "--thresholds", "1,2", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("throughput_tok_s", "committed_tokens", "simulated_s", "latency_p50_s", "latency_p99_s"):
        assert key in out
    assert out["committed_tokens"] >= 3000 and out["thresholds"] == [1, 2] and out["concurrency"] == 4


def test_simulate_flags_match_the_python_api(r2r):
    from trsim import simulate

    result = run(
        "simulate",
        "--P",
        "0.65,0.35;1,0",
        "--C",
        "[[1,0],[1,0]]",
        "--latency-ms",
        "6.0,27.9",
        "--concurrency",
        "8",
        "--thresholds",
        "2,1",
        "--tokens",
        "4000",
        "--seed",
        "3",
        "--json",
    )
    expected = simulate(r2r((2, 1), concurrency=8, seed=3), tokens=4000)
    assert json.loads(result.stdout)["throughput_tok_s"] == pytest.approx(expected.throughput_tok_s)


def test_simulate_scenario_baseline_and_outputs(tmp_path):
    from pathlib import Path

    scenario = Path(__file__).parents[2] / "trsim" / "scenarios" / "r2r-like.yaml"
    chrome, traces = tmp_path / "steps.json", tmp_path / "traces.jsonl"
    result = run(
        "simulate",
        "--scenario",
        scenario,
        "--tokens",
        "3000",
        "--baseline",
        "lockstep",
        "--chrome-trace",
        chrome,
        "--trace-out",
        traces,
    )
    assert result.exit_code == 0, result.output
    assert "lockstep" in result.stdout and "throughput" in result.stdout
    assert json.loads(chrome.read_text())["traceEvents"]
    lines = traces.read_text().splitlines()
    assert lines and all(json.loads(line)["steps"] for line in lines)


def test_recorded_traces_feed_a_trace_scenario(tmp_path):
    traces = tmp_path / "traces.jsonl"
    assert run("simulate", "--workload", "short-reasoning", "--tokens", "3000", "--trace-out", traces).exit_code == 0
    (tmp_path / "replay.yaml").write_text(
        "models: [{latency: {ms: 6.0}}, {latency: {ms: 27.9}}]\nrouter: {program: trace, file: traces.jsonl}\n"
    )
    result = run("simulate", "--scenario", tmp_path / "replay.yaml", "--tokens", "2000", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["handoffs_per_token"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--P", "0.5,0.6;1,0"], "error: --P: row 0 sums to 1.1"),
        (["--P", "0.5,0.5"], "error: --P: must be square"),
        (["--latency-ms", "6,-1"], "error: --latency-ms: model 1: latencies must be positive"),
        (["--thresholds", "9,9"], "error: --thresholds: [9, 9] at concurrency 16: sum of (B_i - 1) = 16"),
        (["--concurrency", "0"], "error: --concurrency: must be a finite number > 0"),
        (["--tokens", "0"], "error: --tokens: must be a finite number > 0"),
        (["--baseline", "vllm"], "error: --baseline: unknown baseline 'vllm'"),
        (["--workload", "chat"], "error: --workload: workload.preset: unknown preset 'chat'"),
        (["--scenario", "/nonexistent.yaml"], "error: /nonexistent.yaml: No such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run("simulate", *args)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(message), result.stderr


def test_malformed_scenario_file_exit_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("models: [{latency: {ms: 5}}]\nworkload: {concurrency: -3}\n")
    result = run("simulate", "--scenario", path)
    assert result.exit_code == 2 and result.stderr.startswith("error: workload.concurrency:")
    path.write_text("models: [{latency: {ms: 5}}]\nrouter: {program: bogus}\n")
    result = run("simulate", "--scenario", path)
    assert result.exit_code == 2 and "unknown routing program 'bogus'" in result.stderr


def test_a_scenarios_adaptive_knobs_without_adaptive_thresholds_are_named_not_dropped(tmp_path):
    path = tmp_path / "knobs.yaml"
    path.write_text(
        "models: [{latency: {ms: 5}}, {latency: {ms: 20}}]\n"
        "router: {program: markov, P: [[0.8, 0.2], [1.0, 0.0]], C: [[1.0, 0.0], [1.0, 0.0]]}\n"
        "workload: {concurrency: 4}\nadaptive: {window_s: 4.0}\n"
    )
    static = run("simulate", "--scenario", path, "--tokens", "2000")
    assert static.exit_code == 0, static.output
    assert "adaptive: knobs apply to simulate --thresholds adaptive, not to this run" in static.stderr
    tuned = run("simulate", "--scenario", path, "--tokens", "2000", "--thresholds", "adaptive")
    assert tuned.exit_code == 0, tuned.output
    assert "note:" not in tuned.stderr
    # A sweep refuses --thresholds adaptive: its note must not send the user there ("apply with --thresholds
    # adaptive; this run keeps its vector" did), but to simulate.
    swept = run("sweep", "--scenario", path, "--thresholds", "1,1", "--tokens", "500", "-j", "1", "--out", tmp_path)
    assert swept.exit_code == 0, swept.output
    assert "knobs apply to simulate --thresholds adaptive, not to this run" in swept.stderr


def test_sweep_writes_json_and_plot(tmp_path):
    result = run("sweep", "--concurrency", "2,3", "--tokens", "2000", "--jobs", "2", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert len(rows) == 3 + 6  # every feasible threshold vector at N = 2 and N = 3
    assert all(r["model_tok_s"] > 0 for r in rows)
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "N=3: best thresholds" in result.stdout


def test_simulate_reads_latency_tables_like_the_throughput_command():
    args = ["--latency-ms", "[6.0, [27.9, 29.0, 30.0]]", "--concurrency", "4", "--json"]
    model = json.loads(run("throughput", *args).stdout)["throughput_tok_s"]
    sim = json.loads(run("simulate", *args, "--tokens", "20000").stdout)["throughput_tok_s"]
    assert sim == pytest.approx(model, rel=0.03)


def test_sweep_rejects_bad_grids(tmp_path):
    result = run("sweep", "--thresholds", "5,5", "--concurrency", "2", "--out", tmp_path)
    assert result.exit_code == 2 and "no feasible threshold vector" in result.stderr


ROOFLINE_PAIR = "roofline:a100-80g:DeepSeek-R1-Distill-Qwen-1.5B,roofline:a100-80g:DeepSeek-R1-Distill-Qwen-32B:tp2"


def test_roofline_latencies_from_the_flags_match_the_python_api():
    from trsim import simulate
    from trsim.build import markov_config
    from trsim.roofline import parse_roofline_spec

    args = ("--latency-ms", ROOFLINE_PAIR, "--concurrency", "4", "--thresholds", "1,2", "--tokens", "3000")
    result = run("simulate", *args, "--json")
    assert result.exit_code == 0, result.output
    models = [parse_roofline_spec(s) for s in ROOFLINE_PAIR.split(",")]
    config = markov_config([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], models, [1, 2], concurrency=4)
    direct = simulate(config, tokens=3000)
    assert json.loads(result.stdout)["throughput_tok_s"] == pytest.approx(direct.throughput_tok_s)
    optimized = run("optimize", "--latency-ms", ROOFLINE_PAIR, "--concurrency", "4", "--json")
    assert optimized.exit_code == 0, optimized.output
    assert json.loads(optimized.stdout)["throughput_tok_s"] > 0


def test_bad_roofline_spec_is_one_line():
    result = run("simulate", "--latency-ms", "roofline:a100-80g:nope,6", "--tokens", "100")
    assert result.exit_code == 2 and "unknown shape 'nope'" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_sweep_of_a_phased_scenario_states_no_token_count_it_did_not_apply(tmp_path):
    """Without --tokens a phased scenario runs to its last phase: the JSON said tokens_per_run 50000 beside runs of
    345,689 tokens (adaptive-phases). With --tokens the count applies to every run and is stated."""
    import yaml

    from tests.sim.test_adaptive_sim import scenario

    path = tmp_path / "phased.yaml"
    path.write_text(yaml.safe_dump(scenario([{"duration_s": 2.0}, {"duration_s": 2.0, "concurrency": 4}])))
    for tokens, stated in ((None, None), (500, 500)):
        extra = ("--tokens", tokens) if tokens else ()
        result = run("sweep", "--scenario", path, "--thresholds", "1,1", "--jobs", "1", "--out", tmp_path, *extra)
        assert result.exit_code == 0, result.output
        out = json.loads((tmp_path / "sweep.json").read_text())
        assert out["tokens_per_run"] == stated and out["points"][0]["cut_short"] == (tokens is not None)


def test_a_sweep_says_which_vectors_it_skipped_as_infeasible(tmp_path):
    """--thresholds 4,1 cannot run at N = 2 (sum(B_i - 1) < N): it runs at N = 8 only, and the skip is said."""
    args = ("--concurrency", "2,8", "--thresholds", "1,1;4,1", "--tokens", "1000", "--jobs", "1", "--no-model")
    result = run("sweep", *args, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert sorted((r["concurrency"], r["thresholds"]) for r in rows) == [(2, [1, 1]), (8, [1, 1]), (8, [4, 1])]
    assert "note: --thresholds 4,1 skipped for flags at N = 2" in result.stderr
