"""`tokenrouter crossval`: the pure parts (cells, summary), bad input, and one end-to-end run on a tiny grid with
the real local pair (two routers, N in {1, 2}, two threshold vectors, a few hundred tokens)."""

from __future__ import annotations

import json
import traceback

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tokenrouter.commands.crossval import crossval
from trserve.crossval.plan import default_routers, make_plan, threshold_vectors
from trserve.crossval.report import add_errors, summarize

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


def _write_profiles(folder, names):
    from trsim.fit import LatencySample
    from trsim.profile import make_profile, save_profile

    folder.mkdir(parents=True)
    for k, name in enumerate(names):  # synthetic linear latencies: this test checks the pipeline, not accuracy
        a, b, c = 0.02 * (k + 1), 0.002, 2e-6
        samples = [LatencySample(n, n * ctx, 0, a + b * n + c * n * ctx) for n in (1, 2, 4) for ctx in (32, 128)]
        save_profile(make_profile(name, {"description": "synthetic"}, samples, ("linear",)), folder / f"{name}.json")


@pytest.mark.serve
def test_tiny_grid_end_to_end_on_the_local_pair(tmp_path, prepared_pair):
    large, small = map(str, prepared_pair)
    model = {"max_model_len": 512, "kv_cache_gib": 0.25, "max_num_seqs": 8}
    data = {"models": [{"name": "small", "path": small, **model}, {"name": "large", "path": large, **model}],
            "server": {"max_active_requests": 8}}  # fmt: skip
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(data))
    _write_profiles(tmp_path / "profiles", ["small", "large"])
    out = tmp_path / "out"
    args = ["--config", str(config), "--concurrency", "1,2", "--thresholds", "1,1;2,1", "--max-tokens", "8",
            "--warmup-s", "0.5", "--measure-s", "3", "--sim-s", "5", "--profiles", str(tmp_path / "profiles"),
            "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    doc = json.loads((out / "crossval.json").read_text())
    assert (out / "crossval.png").stat().st_size > 0 and "| markov | 2 | (2, 1) |" in (out / "crossval.md").read_text()
    assert set(doc["summary"]) == {"markov", "rstitch"}
    keys = {"sim_median_rel_error", "sim_max_rel_error", "model_median_rel_error", "model_max_rel_error"}
    for summary in doc["summary"].values():
        assert keys <= set(summary) and isinstance(summary["sim_best_matches"], bool)
    cells = doc["cells"]
    assert [(c["router"], c["concurrency"], c["thresholds"]) for c in cells] == [
        (r, n, b) for r in ("markov", "rstitch") for n, b in ((1, [1, 1]), (2, [1, 1]), (2, [2, 1]))
    ]
    for c in cells:
        assert c["measured_tok_s"] > 0 and c["model_tok_s"] > 0 and c["sim_tok_s"] > 0
        assert c["steps"][0]["num_steps"] > 0  # the small model stepped inside the window
    for name in ("markov", "rstitch"):
        routing = doc["routing"][name]
        assert all(sum(row) == pytest.approx(1.0) for row in routing["P"])
        if routing["transition_counts"][0][1]:  # both routers drop the small model's token when it hands off
            assert routing["C"][0][1] == 0.0
        traces = (out / f"traces-{name}.jsonl").read_text().splitlines()
        assert traces and all(json.loads(t)["num_output_tokens"] == 8 for t in traces)


def _auto_config(tmp_path, traces_path, concurrency=4, min_gain=0.0, **router):
    from trserve.config import ServeConfig

    models = [{"name": "small", "path": "x", "max_num_seqs": 8}, {"name": "large", "path": "y", "max_num_seqs": 8}]
    auto = {"concurrency": concurrency, "calibration_dir": str(tmp_path), "routing_traces": traces_path,
            "min_gain": min_gain}  # fmt: skip
    data = {"models": models, "batching": {"thresholds": "auto", "auto": auto}, "server": {"max_active_requests": 8}}
    return ServeConfig.model_validate({**data, **router})


def test_auto_thresholds_come_from_profiles_and_traces_via_the_optimizer(tmp_path):
    from trcore.throughput import ThroughputModel, feasible_thresholds
    from trserve.hardware import hardware_tag
    from trserve.server.thresholds import profile_latency, resolve_thresholds
    from trsim.profile import load_profile

    _write_profiles(tmp_path / hardware_tag(), ["small", "large"])
    # 8 requests of a stationary-like pattern: 3 steps on the small model, one (dropped token) on the large one.
    steps = [[0, 0, 1], [0, 0, 1], [0, 1, 0], [1, 0, 1]] * 3
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps({"request_id": f"r{k}", "steps": steps}) + "\n" for k in range(8)))
    cfg = _auto_config(tmp_path, str(traces))
    reported: list[str] = []
    chosen = resolve_thresholds(cfg, report=reported.append)

    # The same optimum by solving every feasible vector one by one (another path through the model), with the
    # P, C the traces imply: the last step of each request returns to the entry model (closed loop).
    P, C = [[8 / 12, 4 / 12], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]
    tables = [[profile_latency(load_profile(tmp_path / hardware_tag() / f"{m}.json"), b) for b in range(1, 5)]
              for m in ("small", "large")]  # fmt: skip
    model = ThroughputModel(P, C, tables, quantum_s=0.1 * min(map(min, tables)), max_batch=[4, 4])
    best = max(feasible_thresholds([4, 4], 4), key=lambda b: model.solve(4, b).throughput_tok_s)
    assert chosen == list(best)
    err = " ".join(reported)
    assert f"thresholds auto: {chosen}" in err and "traces.jsonl" in err and "[0.667, 0.333]" in err


def test_auto_thresholds_use_the_router_matrices_without_traces_and_name_missing_inputs(tmp_path):
    from trcore.errors import ConfigError
    from trserve.hardware import hardware_tag
    from trserve.server.thresholds import resolve_thresholds

    _write_profiles(tmp_path / hardware_tag(), ["small", "large"])
    markov = {"router": {"program": "markov", "params": {"P": [[0.5, 0.5], [1, 0]], "C": [[1, 0], [1, 0]]}}}
    assert len(resolve_thresholds(_auto_config(tmp_path, None, concurrency=2, **markov))) == 2
    with pytest.raises(ConfigError, match="routing_traces"):
        resolve_thresholds(_auto_config(tmp_path, None))  # rstitch has no P: traces are needed
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_thresholds(_auto_config(tmp_path, str(tmp_path / "missing.jsonl")))


def test_rescaling_to_observed_step_times_removes_a_uniform_slowdown(tmp_path):
    from trcore.routing_stats import estimate_routing_stats
    from trcore.traces import RequestTrace, TraceStep
    from trserve.crossval.diagnose import add_rescaled_predictions, rescaled
    from trserve.crossval.predict import load_calibration, model_predictions

    _write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    steps = (TraceStep(0, 0, True), TraceStep(0, 1, False), TraceStep(1, 0, True)) * 10
    traces = [RequestTrace(f"r{k}", steps, 20, 20) for k in range(6)]
    stats = estimate_routing_stats(traces, 2, entry_model=0)
    slow = rescaled(calibration, [2.0, 1.5])  # "the machine was busier than at calibration"
    cells = []
    for b in [(1, 1), (2, 1)]:
        measured = model_predictions(stats, slow, 4, [b], 30, 8, [0.0, 0.0])[b]
        profile = [calibration.table(m, 2, 30)[-1] for m in range(2)]
        steps_seen = [{"num_steps": 10, "mean_batch": 2.0, "mean_step_s": f * p, "busy_fraction": 0.5}
                      for f, p in zip((2.0, 1.5), profile, strict=True)]  # fmt: skip
        cells.append({"router": "r", "concurrency": 4, "thresholds": list(b), "measured_tok_s": measured,
                      "steps": steps_seen, "profile_step_s_at_mean_batch": profile})  # fmt: skip
    summary = add_rescaled_predictions(cells, {"r": stats}, {"r": traces}, calibration, {"r": (30, [0.0, 0.0])}, 8, 60)
    assert [c["slowdown"] for c in cells] == [pytest.approx([2.0, 1.5])] * 2
    assert summary["r"]["model_rescaled_max_rel_error"] < 1e-9
    assert summary["r"]["sim_rescaled_max_rel_error"] < 0.1  # the simulator agrees with the model within noise
    assert summary["r"]["median_slowdown"] == pytest.approx([2.0, 1.5])
