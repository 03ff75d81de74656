"""`tokenrouter throughput` and `tokenrouter optimize`: output formats, defaults, and bad input (exit 2, one line)."""

import json

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.throughput import ThroughputModel

runner = CliRunner()
SMALL = ["--concurrency", "5"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_throughput_json_matches_the_python_api():
    result = run("throughput", "--P", "[[0.65,0.35],[1,0]]", "--thresholds", "2,3", *SMALL, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"throughput_tok_s", "num_states", "thresholds", "std_error_tok_s", "method"}
    assert out["method"] == "exact" and out["std_error_tok_s"] == 0.0
    expected = ThroughputModel([[0.65, 0.35], [1, 0]], [[1, 0], [1, 0]], [0.006, 0.0279], 1e-4).solve(5, [2, 3])
    assert out["throughput_tok_s"] == pytest.approx(expected.throughput_tok_s, rel=1e-12)
    assert out["num_states"] == expected.num_states
    assert out["thresholds"] == [2, 3]


def test_throughput_takes_batch_dependent_latencies_and_max_batch():
    args = ["--latency-ms", "[6.0, [20, 25, 27.9]]", "--max-batch", "4,3", *SMALL, "--thresholds", "1,2", "--json"]
    out = json.loads(run("throughput", *args).stdout)
    model = ThroughputModel([[0.65, 0.35], [1, 0]], [[1, 0], [1, 0]], [0.006, [0.02, 0.025, 0.0279]], 1e-4, [4, 3])
    assert out["throughput_tok_s"] == pytest.approx(model.solve(5, [1, 2]).throughput_tok_s, rel=1e-12)


def test_optimize_json_lists_candidates_best_first():
    result = run("optimize", *SMALL, "--quantum-ms", "0.3", "--latency-ms", "6,27.9", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"thresholds", "throughput_tok_s", "candidates", "elapsed_s"} <= set(out)
    rates = [c["throughput_tok_s"] for c in out["candidates"]]
    assert rates == sorted(rates, reverse=True)
    assert out["candidates"][0]["thresholds"] == out["thresholds"]
    assert out["throughput_tok_s"] == rates[0]
    assert len(rates) == sum(1 for a in range(1, 6) for b in range(1, 6) if a + b - 2 < 5)
    assert out["elapsed_s"] > 0


def test_sampled_method_reports_its_standard_errors():
    result = run("throughput", "--thresholds", "2,3", *SMALL, "--method", "sampled", "--seed", "3", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    exact = ThroughputModel([[0.65, 0.35], [1, 0]], [[1, 0], [1, 0]], [0.006, 0.0279], 1e-4).solve(5, [2, 3])
    assert out["method"] == "sampled" and out["num_states"] == 0
    assert 0 < out["std_error_tok_s"] < 0.01 * out["throughput_tok_s"]
    assert out["throughput_tok_s"] == pytest.approx(exact.throughput_tok_s, rel=0.02)
    table = run("optimize", *SMALL, "--method", "sampled")
    assert table.exit_code == 0, table.output
    assert "(sampled" in table.stdout and "±" in table.stdout


def test_optimize_auto_is_exact_on_a_small_chain():
    out = json.loads(run("optimize", *SMALL, "--method", "auto", "--json").stdout)
    assert out["method"] == "exact"
    assert all(c["num_states"] > 0 for c in out["candidates"])


def test_optimize_defaults_to_auto_which_samples_at_production_concurrency():
    out = json.loads(run("optimize", "--concurrency", "24", "--json").stdout)
    assert out["method"] == "sampled"
    forced = json.loads(run("optimize", *SMALL, "--method", "exact", "--json").stdout)
    assert forced["method"] == "exact"


def test_unknown_method_names_the_option():
    result = run("optimize", *SMALL, "--method", "fast")
    assert result.exit_code == 2
    assert "--method" in result.output and "exact, sampled, auto" in result.output


def test_optimize_table_marks_the_best():
    result = run("optimize", "--concurrency", "4")
    assert result.exit_code == 0, result.output
    assert "best" in result.stdout
    assert "tok/s" in result.stdout


def test_throughput_table():
    result = run("throughput", "--concurrency", "3", "--thresholds", "1,2")
    assert result.exit_code == 0, result.output
    assert "1,2" in result.stdout


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--P", "[[0.6,0.3],[1,0]]"], "--P"),
        (["--P", "[[0.65,0.35],[1,0]"], "--P"),
        (["--P", "[[1.2,-0.2],[1,0]]"], "--P"),
        (["--C", "[[1,-1],[1,0]]"], "--C"),
        (["--C", "[[1,0,0],[1,0,0],[1,0,0]]"], "--C"),
        (["--latency-ms", "6"], "--latency-ms"),
        (["--latency-ms", "6,-27.9"], "--latency-ms"),
        (["--latency-ms", "[6, [27.9, 0]]"], "--latency-ms"),
        (["--latency-ms", "[6, 27.9"], "--latency-ms"),
        (["--quantum-ms", "0"], "--quantum-ms"),
        (["--quantum-ms", "-0.1"], "--quantum-ms"),
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "many"], "--concurrency"),
        (["--thresholds", "0,1"], "--thresholds"),
        (["--thresholds", "17,1"], "--thresholds"),
        (["--thresholds", "9,9"], "--thresholds"),
        (["--thresholds", "1,1,1"], "--thresholds"),
        (["--max-batch", "4"], "--max-batch"),
        (["--thresholds", "8,8", "--max-batch", "4,4"], "--thresholds"),
        (["--latency-ms", "6.0,1e308"], "--latency-ms"),
        (["--latency-ms", "6.0,1e12"], "--latency-ms"),
    ],
)
def test_throughput_bad_input_exits_2_with_one_line(args, field):
    result = run("throughput", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {field}: ")
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--P", "not json"], "--P"),
        (["--concurrency", "-3"], "--concurrency"),
        (["--latency-ms", "6,27.9,40"], "--latency-ms"),
        (["--max-batch", "0,2"], "--max-batch"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_optimize_bad_input_exits_2_with_one_line(args, field):
    result = run("optimize", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), result.stderr


def test_several_closed_classes_is_reported_as_bad_input():
    ones = "[[1,1,1],[1,1,1],[1,1,1]]"
    args = ["--P", "[[0,0.5,0.5],[0,1,0],[0,0,1]]", "--C", ones, "--latency-ms", "1,2,3", "--concurrency", "2"]
    result = run("throughput", *args, "--thresholds", "1,1,1")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: --P: the chain has 3 closed classes")
