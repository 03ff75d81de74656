"""``tokenrouter bench --rate`` / ``--arrivals`` (open-loop load): the options' refusals (exit 2, one line, before
anything starts), the rates and trace checks, the simulator at a rate against hand-worked figures, and two short
real runs on emulated engines (Poisson for two routed systems and a baseline; a trace for the baseline) whose
JSON is checked for structure and counts, never timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.serve.emulated_fixtures import emulated_config
from tokenrouter.commands.bench import bench
from trcore import ConfigError
from trserve.bench.arrivals import Arrivals, poisson, read_trace
from trserve.bench.client import Workload
from trserve.bench.open_load import OpenLoad, load_trace, parse_rates, rate_options
from trserve.bench.open_predict import policies, ratios, sim_at_arrivals


def refused(args: list[str]) -> str:
    """The one line ``tokenrouter bench args`` exits 2 with."""
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "arrivals.txt"
    path.write_text("0.1\n0.5\n1.2\n")
    return path


@pytest.mark.parametrize("other", [["-n", "4"], ["--concurrency", "1,4,8,16"]])
def test_concurrency_with_open_loop_options_is_refused(other: list[str], trace: Path) -> None:
    for load in (["--rate", "2"], ["--arrivals", str(trace)]):
        assert refused([*other, *load]).startswith("error: --concurrency: sets the closed loop")


def test_direct_is_refused_under_open_load_which_runs_no_plain_vllm_reference(trace: Path) -> None:
    for load in (["--rate", "2"], ["--arrivals", str(trace), "--warmup-s", "0"]):
        for flag in ("--direct", "--no-direct"):
            assert refused([*load, flag]).startswith("error: --direct: drives plain vLLM in a closed loop")


def test_rate_and_arrivals_together_and_a_seed_without_rate_are_refused(trace: Path) -> None:
    assert refused(["--rate", "2", "--arrivals", str(trace)]).startswith("error: --arrivals: replays a trace")
    assert refused(["--arrival-seed", "3"]).startswith("error: --arrival-seed: seeds the Poisson arrivals")


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "must be finite and > 0 requests/s, got 0"), ("2,-1", "got -1"), ("fast", "comma-separated numbers"),
     ("nan", "finite and > 0"), ("inf", "finite and > 0"), (",", "needs at least one rate"),
     ("2,4,2.0", "2 requests/s is given twice")],
)  # fmt: skip
def test_bad_rates_name_the_option(text: str, message: str) -> None:
    line = refused(["--rate", text])
    assert line.startswith("error: --rate: ") and message in line
    with pytest.raises(ConfigError, match=message):
        parse_rates(text)


def test_a_rate_with_no_arrival_to_expect_in_the_window_is_refused() -> None:
    line = refused(["--rate", "5,1e-9"])  # the default window: 4 s
    assert line.startswith("error: --rate: 1e-09 requests/s expects 4e-09 arrivals in the 4 s measured window")
    assert refused(["--rate", "0.2", "--window-s", "4"]).startswith("error: --rate: 0.2 requests/s")
    assert rate_options("0.25", None, 4.0) == (0.25,)


def test_a_rate_beyond_what_one_client_sends_is_refused_before_drawing_its_arrivals() -> None:
    # Before: --rate 1e9 drew 4e9 arrival times (minutes, gigabytes) before the first window.
    with pytest.raises(ConfigError, match=r"--rate: 1e\+09 requests/s expects 4e\+09 arrivals .* at most 1,000,000"):
        rate_options("5,1e9", None, 4.0)
    assert rate_options("250000", None, 4.0) == (250000.0,)


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "holds no arrival times"), ("0\n2\n1\n", "comes before the previous arrival"),
     ("-0.5\n", "times must be >= 0"), ("[0, 1e999]", "times must be finite"), (b"\xff\xfe\x00", "not a text file"),
     (None, "No such file"), ("[6, 7]", "no arrival in the measured window [1.5, 5.5) s")],
)  # fmt: skip
def test_a_bad_arrivals_file_names_the_option(tmp_path: Path, content: str | bytes | None, message: str) -> None:
    path = tmp_path / "arrivals.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    line = refused(["--arrivals", str(path)])  # default warm-up 1.5 s, window 4 s
    assert line.startswith("error: --arrivals: ") and message in line, line


def test_parse_rates_and_the_trace_formats(tmp_path: Path) -> None:
    assert parse_rates("2, 4.5,8") == (2.0, 4.5, 8.0)
    listed = tmp_path / "a.json"
    listed.write_text("[0.25, 0.5, 2]")
    assert load_trace(listed, 0.3, 1.0).times_s == (0.25, 0.5, 2.0)  # 0.5 falls in [0.3, 1.3)
    lines = tmp_path / "b.txt"
    lines.write_text("# seconds from the warm-up's start\n0.25\n\n0.5  # two\n0.5\n")
    assert load_trace(lines, 0.3, 1.0).times_s == (0.25, 0.5, 0.5)


def test_each_window_draws_its_own_seed_and_a_trace_replays_as_it_is(tmp_path: Path) -> None:
    load = OpenLoad(rates=(2.0, 5.0), seed=7)
    assert load.keys == (2.0, 5.0)
    assert load.arrivals(5.0, 0, 3.0) == poisson(5.0, 3.0, 7) and load.arrivals(5.0, 2, 3.0) == poisson(5.0, 3.0, 9)
    path = tmp_path / "t.txt"
    path.write_text("0\n1\n")
    replay = OpenLoad(trace=read_trace(path))
    assert replay.keys == (None,) and replay.arrivals(None, 3, 9.0) is replay.trace
    with pytest.raises(ValueError, match="either rates or an arrivals trace"):
        OpenLoad()


def test_the_simulator_replays_each_windows_arrivals_and_pools_them_as_measured() -> None:
    """One model, 4 ms a step whatever the batch, B = 1, 8-token answers (8 steps), warm-up 0.25 s then a 1 s
    window. Window 0: a request at 0.1 s (done at 0.132 s, in the warm-up), two at 0.3 s sharing their steps and one
    at 0.9 s: 24 tokens in the window; window 1: one request at 0.2 s, done before the window opens: none. Throughput
    is the median over the windows, latencies those of the three requests that finished inside a window."""
    work = Workload(max_tokens=8, warmup_s=0.25, window_s=1.0)
    windows = [Arrivals((0.1, 0.3, 0.3, 0.9), "test"), Arrivals((0.2,), "test")]
    sim = sim_at_arrivals([[1.0]], [[1.0]], [[0.004] * 4], windows, work, None, "tokenrouter", 64)
    assert sim["windows_tok_s"] == pytest.approx([24.0, 0.0]) and sim["throughput_tok_s"] == pytest.approx(12.0)
    assert sim["num_finished"] == 3 and sim["backlog_at_end"] == [0, 0] and sim["simulated_s"] == 1.25
    for name, value in (("ttft", 0.004), ("tpot", 0.004), ("e2e", 0.032)):
        assert sim[f"{name}_p50_s"] == pytest.approx(value) and sim[f"{name}_p99_s"] == pytest.approx(value), name
    # A request at 1.231 s has 4 of its tokens in by the window's end (1.25 s) and is the backlog.
    cut = sim_at_arrivals([[1.0]], [[1.0]], [[0.004] * 4], [Arrivals((1.231,), "test")], work, None, "b1", 64)
    assert cut["backlog_at_end"] == [1] and cut["num_finished"] == 0 and cut["windows_tok_s"] == pytest.approx([4.0])
    measured = {"throughput_tok_s": 6.0, "ttft_p50_s": None, "tpot_p50_s": 0.008}
    expected = {"throughput_tok_s": 0.5, "tpot_p50_s": 2.0}
    assert ratios(measured, sim) == pytest.approx(expected)
    assert ratios(measured, None) is None


def test_the_simulated_policies_are_the_servers_table_columns() -> None:
    table = {1: [1, 1], 8: [2, 5]}
    small, large = policies(table, 2, 64)
    assert dict(small.table) == {1: 1, 8: 2} and dict(large.table) == {1: 1, 8: 5}
    assert small.max_wait_s == 0.05 and small.max_batch == 64 and small.peer_slack == 0
    assert [(p.threshold, dict(p.table), p.max_wait_s) for p in policies(None, 2, 64)] == [(1, {}, None)] * 2


MAX_TOKENS = 8
WARMUP_S, WINDOW_S = 0.3, 1.0
REPETITIONS = 2


def run_bench(tmp: Path, *args: str) -> dict[str, Any]:
    """``tokenrouter bench`` on the emulated config (1 / 2 ms steps, the markov router) with short windows."""
    config = tmp / "serve.yaml"
    config.write_text(yaml.safe_dump(emulated_config()))
    out = tmp / "out"
    cmd = [sys.executable, "-m", "tokenrouter.cli", "bench", "--config", str(config), "--routers", "markov",
           "--repetitions", str(REPETITIONS), "--warmup-s", str(WARMUP_S), "--window-s", str(WINDOW_S),
           "--max-tokens", str(MAX_TOKENS), "--out", str(out), *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "bench.png").stat().st_size > 10_000
    return {"doc": json.loads((out / "bench.json").read_text()), "md": (out / "bench.md").read_text()}


def check_measured(run: dict[str, Any], expected_sent: list[int]) -> None:
    """Structure and counts of one measured cell: every arrival of the run sent, answers whole, latencies sane."""
    assert run["num_sent"] == expected_sent and len(run["backlog_at_end"]) == REPETITIONS, run
    assert run["num_errors"] == 0 and run["throughput_tok_s"] > 0 and run["num_finished"] > 0, run
    assert run["answered"]["tokens"] == run["answered"]["asked_tokens"] == MAX_TOKENS * run["answered"]["requests"]
    assert 0 < run["answered"]["requests"] <= sum(expected_sent)
    for name in ("ttft", "tpot", "e2e"):
        assert 0 < run[f"{name}_p50_s"] <= run[f"{name}_p99_s"], (name, run)
    assert run["e2e_p50_s"] >= run["ttft_p50_s"] and run["dispatch_lag_max_s"] >= run["dispatch_lag_mean_s"] >= 0


@pytest.mark.serve
def test_a_poisson_bench_measures_every_system_and_predicts_the_routed_ones(tmp_path: Path) -> None:
    rate = 20.0
    bench_run = run_bench(tmp_path, "--systems", "tokenrouter-b1,tokenrouter,llm-only", "--rate", f"{rate:g}",
                          "--arrival-seed", "5")  # fmt: skip
    doc = bench_run["doc"]
    assert "runs" not in doc and doc["settings"]["load"]["rates_rps"] == [rate]  # open_runs in their place
    assert doc["settings"]["threshold_table_concurrencies"] == [1, 4, 8, 16]
    runs = {r["system"]: r for r in doc["open_runs"]}
    assert set(runs) == {"tokenrouter-b1", "tokenrouter", "llm-only"} and len(doc["open_runs"]) == 3
    # Window k of every system draws seed 5 + k over the run (warm-up and window): all of them are sent.
    sent = [len(poisson(rate, WARMUP_S + WINDOW_S, 5 + k).times_s) for k in range(REPETITIONS)]
    for system, run in runs.items():
        assert run["rate_rps"] == rate and run["load"] == "poisson"
        check_measured(run, sent)
        if system == "llm-only":
            assert run["sim"] is None and run["latency_source"].startswith("none: a baseline"), run
            continue
        assert run["latency_source"] == "emulated latencies (the config's)"
        sim = run["sim"]  # each window's own draw replayed over its warm-up and window
        assert sim["throughput_tok_s"] > 0 and sim["simulated_s"] == WARMUP_S + WINDOW_S
        assert len(sim["windows_tok_s"]) == len(sim["backlog_at_end"]) == REPETITIONS
        assert sim["arrivals"] == "each window's own" and 0 < sim["num_finished"] <= sum(sent)
        assert set(run["measured_over_sim"]) == {"throughput_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
                                                 "tpot_p99_s", "e2e_p50_s", "e2e_p99_s"}  # fmt: skip
    assert runs["tokenrouter"]["threshold_table"].keys() == {"1", "4", "8", "16"}
    assert runs["tokenrouter-b1"]["threshold_table"] is None
    md = bench_run["md"]
    # A table of measured figures, and one of measured / simulated for the two routed systems.
    assert "### Poisson 20 req/s" in md and "Measured / simulated over the same arrivals" in md
    assert md.count("| markov | tokenrouter") == 4 and md.count("| none | llm-only |") == 1


@pytest.mark.serve
def test_a_trace_is_replayed_in_every_window_up_to_the_windows_end(tmp_path: Path) -> None:
    times = [0.0, 0.1, 0.2, 0.35, 0.5, 0.5, 0.8, 1.0, 1.25, 1.29, 1.31, 2.0]  # the run ends at 1.3 s
    path = tmp_path / "arrivals.json"
    path.write_text(json.dumps(times))
    doc = run_bench(tmp_path, "--systems", "tokenrouter-b1,llm-only", "--arrivals", str(path))["doc"]
    runs = {r["system"]: r for r in doc["open_runs"]}
    assert doc["settings"]["load"]["times_s"] == times and set(runs) == {"tokenrouter-b1", "llm-only"}
    for run in runs.values():
        assert run["load"] == "trace" and run["rate_rps"] is None
        check_measured(run, [10] * REPETITIONS)  # the arrivals before 1.3 s
        assert run["arrivals"] == [{"source": "trace arrivals.json", "num_arrivals": 12}] * REPETITIONS
        assert all(rate > 0 for rate in run["offered_rps_windows"])
    assert runs["llm-only"]["sim"] is None  # a baseline
    sim = runs["tokenrouter-b1"]["sim"]  # the trace's times replayed in every window, up to its end
    assert sim["throughput_tok_s"] > 0 and len(sim["windows_tok_s"]) == REPETITIONS
    assert 0 < sim["num_finished"] + sum(sim["backlog_at_end"]) <= 10 * REPETITIONS
    assert "throughput_tok_s" in runs["tokenrouter-b1"]["measured_over_sim"]
