"""`tokenrouter crossval`: the pure parts (cells, summary), bad input, and one end-to-end run on a tiny grid with
the real local pair (two routers, N in {1, 2}, two threshold vectors, a few hundred tokens)."""

from __future__ import annotations

import json
import traceback

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.serve.synthetic_profiles import by_hand, write_profiles
from tokenrouter.commands.crossval import crossval
from trserve.crossval.plan import default_routers, make_plan, threshold_vectors
from trserve.crossval.report import add_errors, summarize
from trserve.crossval.repredict import repredict_outputs

app = typer.Typer()
app.command()(crossval)
runner = CliRunner()


def test_threshold_vectors_are_the_feasible_set_then_a_grid():
    assert threshold_vectors(2, 1) == [(1, 1)]
    assert threshold_vectors(2, 2) == [(1, 1), (1, 2), (2, 1)]
    assert len(threshold_vectors(2, 4)) == 10  # sum(B_i - 1) <= 3
    grid = threshold_vectors(2, 8)
    assert (8, 1) in grid and (3, 1) not in grid and all(sum(b) - 2 < 8 for b in grid)


def test_plan_drops_vectors_infeasible_at_a_concurrency_and_rejects_an_empty_set():
    plan = make_plan(2, [1, 2], default_routers(), [(1, 1), (2, 1)])
    assert plan.thresholds == {1: [(1, 1)], 2: [(1, 1), (2, 1)]} and plan.num_cells == 2 * 3
    from trcore.errors import ConfigError

    with pytest.raises(ConfigError, match="thresholds"):
        make_plan(2, [1], default_routers(), [(2, 2)])


def _cell(n, b, measured, model, sim):
    return add_errors({"router": "r", "concurrency": n, "thresholds": b, "measured_tok_s": measured,
                       "model_tok_s": model, "sim_tok_s": sim})  # fmt: skip


def test_summary_errors_and_best_threshold_matching():
    cells = [
        _cell(4, [1, 1], 100.0, 90.0, 101.0),  # measured best
        _cell(4, [2, 1], 99.0, 120.0, 100.0),  # model's pick: 1% below the best -> still a match
        _cell(8, [1, 1], 100.0, 100.0, 80.0),
        _cell(8, [2, 1], 90.0, 95.0, 95.0),  # sim's pick at N=8: 10% below -> no match
    ]
    s = summarize(cells)["r"]
    assert s["model_max_rel_error"] == pytest.approx(120 / 99 - 1)
    assert s["model_median_rel_error"] == pytest.approx((0.1 + 5 / 90) / 2)  # of 0.1, 21/99, 0, 5/90
    assert s["model_best_matches"] is True and s["sim_best_matches"] is False
    assert s["best_by_n"]["8"]["sim"]["picked"] == [2, 1]


def test_unknown_router_is_one_line_exit_2():
    result = runner.invoke(app, ["--routers", "markov,nope"])
    assert result.exit_code == 2 and "--routers: unknown router 'nope'" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--workload", "fixed,chat"], "--workload: unknown workload 'chat'"),
     (["--drift", "maybe"], "--drift: unknown mode 'maybe'"), (["--drift-tolerance", "0"], "--drift-tolerance"),
     (["--drift-probe", "nearby"], "--drift-probe: unknown placement 'nearby'")],
)  # fmt: skip
def test_bad_workload_and_drift_options_are_one_line_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--thresholds", "1,1;2,1;1,1"], "--thresholds: a value is given twice"),
     (["--routers", "markov,rstitch,markov"], "--routers: a router is given twice"),
     (["--workload", "fixed,fixed"], "--workload: a workload is given twice"),
     (["--routers", "markov", "--tau", "3"], "--tau: sets the rstitch router, which --routers (markov) leaves out"),
     (["--routers", "rstitch", "--markov-c", "[[1,0],[1,0]]"], "--markov-c: sets the markov router"),
     (["--markov-p", "[[0.5,0.6],[1,0]]"], "--markov-p: row 0 sums to 1.1"),
     (["--tau-back", "nan"], "--tau-back: must be a finite entropy"),
     (["--drift", "skip", "--drift-probe", "serving"], "--drift-probe: places the drift probe, which --drift skip")],
)  # fmt: skip
def test_options_that_would_run_twice_or_do_nothing_are_refused_before_any_cell(args, message):
    # Before: duplicates ran every cell twice under one name (or a workload twice into one folder), a router's
    # options beside --routers without it, a NaN entropy and the probe's placement under --drift skip were
    # ignored, and a bad --markov-p was refused as 'P' after the run's first line.
    result = runner.invoke(app, ["--config", "configs/emulated-r2r-a100.yaml", "--no-stack-probe", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.serve
def test_tiny_grid_end_to_end_on_the_local_pair(tmp_path, prepared_pair):
    large, small = map(str, prepared_pair)
    model = {"max_model_len": 512, "kv_cache_gib": 0.25, "max_num_seqs": 8}
    data = {"models": [{"name": "small", "path": small, **model}, {"name": "large", "path": large, **model}],
            "server": {"max_active_requests": 8}}  # fmt: skip
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(data))
    write_profiles(tmp_path / "profiles", ["small", "large"])
    out = tmp_path / "out"
    args = ["--config", str(config), "--concurrency", "2", "--thresholds", "1,1;2,1", "--max-tokens", "8",
            "--warmup-s", "0.5", "--measure-s", "2", "--repeats", "2", "--sim-s", "5", "--drift", "report",
            "--profiles", str(tmp_path / "profiles"), "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    doc = json.loads((out / "crossval.json").read_text())
    assert (out / "crossval.png").stat().st_size > 0 and "| markov | 2 | (2, 1) |" in (out / "crossval.md").read_text()
    assert set(doc["summary"]) == {"markov", "rstitch"}
    keys = {"sim_median_rel_error", "sim_max_rel_error", "model_median_rel_error", "model_max_rel_error"}
    assert doc["inputs"].startswith("out of sample")
    for summary in doc["summary"].values():
        assert keys <= set(summary) and isinstance(summary["sim_best_matches"], bool)
        assert summary["out_of_sample"] is True  # repeat 0 fed the predictors, repeat 1 was scored
    drift = doc["drift"]  # the synthetic profiles are far from the real engines: reported, not applied
    assert drift["action"] in ("reported only", "within tolerance") and drift["factors"] == [1.0, 1.0]
    assert all(n > 0 for n in drift["num_steps"]) and all(r > 0 for r in drift["ratios"])
    assert drift["placement"].startswith("serving")  # auto: the real engines share this machine's CPUs
    assert "Drift probe: the engines stepped at" in (out / "crossval.md").read_text()
    lines = result.output.splitlines()  # the probe ran after the input repeat, before the scored one
    probe_at = next(i for i, line in enumerate(lines) if line.startswith("drift probe:"))
    assert max(i for i, line in enumerate(lines) if "-r0:" in line) < probe_at
    assert probe_at < min(i for i, line in enumerate(lines) if "-r1:" in line)
    cells = doc["cells"]
    assert [(c["router"], c["concurrency"], c["thresholds"]) for c in cells] == [
        (r, 2, b) for r in ("markov", "rstitch") for b in ([1, 1], [2, 1])
    ]
    for c in cells:
        assert c["measured_tok_s"] > 0 and c["sim_tok_s"] > 0
        # Scored: repeat 1 alone; repeat 0's throughput is reported beside it (its traces fed the predictors).
        assert c["measured_runs"] == [c["measured_tok_s"]] and c["input_run_tok_s"] > 0
        assert c["steps"][0]["num_steps"] > 0  # the small model stepped inside the window
        real = c["fidelity"]["real"]
        assert real["num_requests"] > 0 and sum(real["batch_histograms"][0].values()) == c["steps"][0]["num_steps"]
        assert real["breakdown"]["num_requests"] == real["num_requests"]  # every finished full-length request
        for side in ("real", "sim"):
            _check_breakdown_adds_up(c["fidelity"][side]["breakdown"], side, 1e3 * doc["stack"]["delivery_s"])
    assert "Where a request's latency goes" in (out / "crossval.md").read_text()
    for name in ("markov", "rstitch"):
        _check_predicted_from_repeat_0(doc, name, out / f"traces-{name}.jsonl")
        _check_errors_from_the_values_shown(doc, name)
    check_repredicted_as_written(out, doc)


def check_repredicted_as_written(out, doc):
    """Predicting a written run again from its folder alone, with the simulator that wrote it, gives the same
    figures: every input the simulator took (traces, profiles, stack costs, KV pools, drift factors, arrivals) was
    written down."""
    again = repredict_outputs(str(out))
    assert again["repredicted"]["measured"] == doc["created"]
    for old, new in zip(doc["cells"], json.loads(json.dumps(again["cells"])), strict=True):
        assert new["sim_tok_s"] == old["sim_tok_s"] and new["measured_tok_s"] == old["measured_tok_s"]
        assert new["fidelity"]["sim"] == old["fidelity"]["sim"] and new["memory"]["sim"] == old["memory"]["sim"]
    assert json.loads((out / "crossval.json").read_text())["summary"] == json.loads(json.dumps(doc["summary"]))


def _check_breakdown_adds_up(parts, side, probed_delivery_ms):
    mean = parts["mean_ms"]
    summed = sum(v for k, v in mean.items() if k.split("[")[0] in ("to_first_launch", "queue", "handoff", "step"))
    assert summed + mean["delivery"] == pytest.approx(mean["e2e"], rel=1e-6), side
    assert parts["mean_steps"][0] > 0 and mean["step[0]"] > 0 and mean["to_first_launch"] >= 0, side
    assert mean["delivery"] > 0, side
    if side == "sim":  # the simulator delivers each request the stack probe's delivery after its last step
        assert mean["delivery"] == pytest.approx(probed_delivery_ms), side


def _profile_table(model, context, cap):
    """The synthetic profiles' step times by hand (``by_hand``) for batches 1 .. ``cap`` at ``context``."""
    return [by_hand(model, b, context) for b in range(1, cap + 1)]


def _check_predicted_from_repeat_0(doc, name, traces_path):
    """The router's routing statistics come from its replayed traces, which are repeat 0's; every cell's model
    prediction is the throughput model on those statistics and the profiles' latencies at the reported context."""
    from trcore.throughput import ThroughputModel
    from trcore.traces import trace_from_dict

    traces = [trace_from_dict(json.loads(line), 2) for line in traces_path.read_text().splitlines()]
    assert traces and all(t.num_output_tokens == 8 for t in traces)
    cells = [c for c in doc["cells"] if c["router"] == name]
    tags = {f"{name}-n{c['concurrency']}-b{'_'.join(map(str, c['thresholds']))}-r0" for c in cells}
    assert {t.request_id.rsplit("-", 1)[0] for t in traces} == tags  # repeat 0 of every cell, no repeat 1
    # The statistics are those of the router's finished full-length requests, a subset of the replayed traces.
    routing = doc["routing"][name]
    assert 0 < routing["num_requests"] <= len(traces)
    assert 0 < routing["num_steps"] <= sum(len(t.steps) for t in traces)
    for row, counts in zip(routing["P"], routing["transition_counts"], strict=True):
        if sum(counts):  # a visited model: its row of P is its observed moves
            assert row == pytest.approx([n / sum(counts) for n in counts], rel=1e-12)
    if routing["transition_counts"][0][1]:  # both routers drop the small model's token when it hands off
        assert routing["C"][0][1] == 0.0
    for c in cells:
        n, cap = c["concurrency"], min(8, c["concurrency"])  # max_num_seqs 8
        tables = [_profile_table(m, routing["typical_context"], cap) for m in range(2)]
        model = ThroughputModel(routing["P"], routing["C"], tables, quantum_s=1e-3, max_batch=[cap, cap])
        assert c["model_tok_s"] == pytest.approx(model.solve(n, c["thresholds"]).throughput_tok_s, rel=1e-6)


def _check_errors_from_the_values_shown(doc, name):
    import statistics

    cells = [c for c in doc["cells"] if c["router"] == name]
    summary = doc["summary"][name]
    for p in ("model", "sim"):
        errors = [abs(c[f"{p}_tok_s"] - c["measured_tok_s"]) / c["measured_tok_s"] for c in cells]
        assert [c[f"{p}_rel_error"] for c in cells] == pytest.approx(errors)
        assert summary[f"{p}_median_rel_error"] == pytest.approx(statistics.median(errors))
        assert summary[f"{p}_max_rel_error"] == pytest.approx(max(errors))
    for metric in ("ttft_p50", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99"):
        pairs = [(c["fidelity"]["real"][metric], c["fidelity"]["sim"][metric]) for c in cells]
        errors = [abs(s - r) / r for r, s in pairs if r and s is not None]
        assert errors, metric
        assert summary["latency"][metric]["sim_median_rel_error"] == pytest.approx(statistics.median(errors)), metric
        assert summary["latency"][metric]["sim_max_rel_error"] == pytest.approx(max(errors)), metric


def test_the_default_output_folder_is_outside_the_checkout_under_the_tests(calibration_outside_the_checkout) -> None:
    """A refusal test that regressed would run its grid into the default --out: never the committed folder."""
    from trserve.paths import calibration_dir

    assert calibration_dir("crossval", "cpu-2core").is_relative_to(calibration_outside_the_checkout)
