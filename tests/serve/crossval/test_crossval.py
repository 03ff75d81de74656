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


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--workload", "fixed,chat"], "--workload: unknown workload 'chat'"),
     (["--drift", "maybe"], "--drift: unknown mode 'maybe'"), (["--drift-tolerance", "0"], "--drift-tolerance"),
     (["--drift-probe", "nearby"], "--drift-probe: unknown placement 'nearby'")],
)  # fmt: skip
def test_bad_workload_and_drift_options_are_one_line_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def _write_profiles(folder, names):
    from trserve.hardware import cpu_model, local_gpu_name
    from trsim.fit import LatencySample
    from trsim.profile import make_profile, save_profile

    folder.mkdir(parents=True)
    for k, name in enumerate(names):  # synthetic linear latencies: this test checks the pipeline, not accuracy
        a, b, c = 0.02 * (k + 1), 0.002, 2e-6
        samples = [LatencySample(n, n * ctx, 0, a + b * n + c * n * ctx) for n in (1, 2, 4) for ctx in (32, 128)]
        machine = {"description": "synthetic", "cpu_model": cpu_model(), "accelerator": local_gpu_name()}
        save_profile(make_profile(name, machine, samples, ("linear",)), folder / f"{name}.json")


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


def _check_breakdown_adds_up(parts, side, probed_delivery_ms):
    mean = parts["mean_ms"]
    summed = sum(v for k, v in mean.items() if k.split("[")[0] in ("to_first_launch", "queue", "handoff", "step"))
    assert summed + mean["delivery"] == pytest.approx(mean["e2e"], rel=1e-6), side
    assert parts["mean_steps"][0] > 0 and mean["step[0]"] > 0 and mean["to_first_launch"] >= 0, side
    assert mean["delivery"] > 0, side
    if side == "sim":  # the simulator delivers each request the stack probe's delivery after its last step
        assert mean["delivery"] == pytest.approx(probed_delivery_ms), side


# The synthetic profiles by hand (_write_profiles): model k steps a batch of b at `context` tokens each in
# 0.02 (k + 1) + 0.002 b + 2e-6 b context seconds.
def _profile_table(model, context, cap):
    return [0.02 * (model + 1) + 0.002 * b + 2e-6 * b * context for b in range(1, cap + 1)]


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


def test_rescaling_to_observed_step_times_matches_a_hand_computed_throughput(tmp_path):
    from trcore.routing_stats import estimate_routing_stats
    from trcore.traces import RequestTrace, TraceStep
    from trserve.crossval.diagnose import add_rescaled_predictions
    from trserve.crossval.predict import load_calibration

    _write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    # One request at a time, alternating small, large, small, ...: every step commits one token.
    steps = (TraceStep(0, 1, True), TraceStep(1, 0, True)) * 15
    traces = [RequestTrace(f"r{k}", steps, 20, 30) for k in range(6)]
    stats = estimate_routing_stats(traces, 2, entry_model=0)
    # The synthetic profiles by hand at batch 1, 30 tokens of context: a_k + b + c * 30.
    lat = [0.02 * (k + 1) + 0.002 + 2e-6 * 30 for k in range(2)]
    slow = (2.0, 1.5)  # "the machine was busier than at calibration"
    measured = 2 / (slow[0] * lat[0] + slow[1] * lat[1])  # two tokens per small + large visit
    steps_seen = [{"num_steps": 10, "mean_batch": 1.0, "mean_step_s": f * t, "busy_fraction": 0.5}
                  for f, t in zip(slow, lat, strict=True)]  # fmt: skip
    cell = {"router": "r", "concurrency": 1, "thresholds": [1, 1], "measured_tok_s": measured,
            "steps": steps_seen, "profile_step_s_at_mean_batch": lat}  # fmt: skip
    summary = add_rescaled_predictions([cell], {"r": stats}, {"r": traces}, calibration, {"r": (30, [0.0, 0.0])}, 8, 60)
    assert cell["slowdown"] == pytest.approx([2.0, 1.5])
    assert cell["model_rescaled_tok_s"] == pytest.approx(measured, rel=0.02)  # 1 ms time grid
    assert cell["sim_rescaled_tok_s"] == pytest.approx(measured, rel=0.05)  # the sim also prices the prefills
    assert summary["r"]["median_slowdown"] == pytest.approx([2.0, 1.5])
    assert 2 / (lat[0] + lat[1]) > 1.5 * measured  # without the rescaling the prediction would be far off


def _run(latencies, steps, tokens=100, intended=None):
    from trserve.crossval.harness import CellRun, StepRecord

    records = [StepRecord(0.0, m, b, 0.01, b, h) for m, b, h in steps]
    return CellRun(tokens / 10, tokens, 10.0, [], [], records, len(latencies), intended or {}, latencies=latencies)


def test_real_fidelity_by_hand_and_the_comparison_with_a_simulated_run():
    from trserve.crossval.fidelity import compare, histogram_distance, real_fidelity, summarize_fidelity

    # (submitted, first token, done, tokens): TTFT 1 and 3 s, TPOT (9 - 1) / 4 = 2 and (5 - 3) / 4 = 0.5 s.
    run = _run([(0.0, 1.0, 9.0, 5), (0.0, 3.0, 5.0, 5)], [(0, 2, 1), (0, 2, 0), (0, 1, 1), (1, 1, 0)], tokens=4)
    real = real_fidelity([run], 2, 0)
    assert real["ttft_p50"] == pytest.approx(2.0) and real["tpot_p50"] == pytest.approx(1.25)
    assert real["e2e_p50"] == pytest.approx(7.0) and real["e2e_p99"] == pytest.approx(5 + 4 * 0.99)
    assert real["batch_histograms"] == [{1: 1, 2: 2}, {1: 1}]
    assert real["handoffs_per_token"] == pytest.approx(2 / 4) and real["llm_step_share"] == pytest.approx(1 / 6)
    assert histogram_distance({1: 1, 2: 1}, {2: 2}) == pytest.approx(0.5)
    assert histogram_distance({1: 3}, {}) is None
    sim = {**real, "ttft_p50": 2.2, "tpot_p99": None, "batch_histograms": [{2: 3}, {1: 5}], "llm_step_share": 0.25}
    diff = compare(real, sim)
    assert diff["latency_rel_error"]["ttft_p50"] == pytest.approx(0.1) and diff["latency_rel_error"]["tpot_p99"] is None
    assert diff["batch_histogram_distance"] == [pytest.approx(1 / 3), 0.0]
    assert diff["llm_step_share_diff"] == pytest.approx(0.25 - 1 / 6) and diff["handoff_rel_error"] == 0.0
    cells = [{"router": "r", "fidelity": {"sim_vs_real": diff}}, {"router": "r", "fidelity": {"sim_vs_real": diff}}]
    latency = summarize_fidelity(cells)["r"]["latency"]
    assert set(latency) >= {"ttft_p50", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99"}
    assert (
        latency["ttft_p50"]["sim_max_rel_error"] == pytest.approx(0.1) and latency["e2e_p50"]["sim_max_rel_error"] == 0
    )
    assert latency["tpot_p99"]["sim_median_rel_error"] is None


def test_first_repeat_is_the_input_and_only_later_repeats_are_scored():
    from trserve.crossval.run import input_runs

    plan = make_plan(2, [2], default_routers(), [(1, 1)], repeats=3)
    runs = [(rep, router, 2, (1, 1), _run([], [])) for rep in range(3) for router in plan.routers]
    inputs, scored = input_runs(plan, runs)
    assert {m[0] for m in inputs} == {0} and {m[0] for m in scored} == {1, 2} and len(scored) == 4
    single = make_plan(2, [2], default_routers(), [(1, 1)], repeats=1)
    assert input_runs(single, runs[:2]) == (runs[:2], runs[:2])  # in sample, and the summary says so


def test_typical_context_weights_long_requests_by_their_steps():
    from trcore.traces import RequestTrace
    from trserve.crossval.predict import typical_context

    traces = [RequestTrace("a", (), 40, 64), RequestTrace("b", (), 60, 64)]
    assert typical_context(traces, [64]) == 50 + 32
    assert typical_context(traces, [10, 30]) == 50 + round((100 + 900) / 80)  # 12.5 -> position 12


def test_drift_ratios_from_decode_steps_and_what_each_mode_does(tmp_path):
    from trcore.errors import ConfigError
    from trserve.crossval.drift import step_ratios
    from trserve.crossval.harness import StepRecord
    from trserve.crossval.predict import load_calibration
    from trserve.server.drift import decide

    _write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    by_hand = {(k, b): 0.02 * (k + 1) + 0.002 * b + 2e-6 * b * 50 for k in range(2) for b in (1, 2, 4)}
    steps = [StepRecord(0.0, k, b, f * by_hand[k, b], b) for k, f in ((0, 1.2), (1, 0.8)) for b in (1, 2, 4)]
    steps.append(StepRecord(0.0, 0, 2, 10.0, 70))  # a prefill step: not a decode step, left out
    measured = step_ratios(steps, calibration, 50, 2)
    ratios, per_batch, counts = measured.ratios, measured.per_batch, measured.num_steps
    assert ratios == [pytest.approx(1.2), pytest.approx(0.8)] and counts == [3, 3]
    assert per_batch[1] == {1: pytest.approx(0.8), 2: pytest.approx(0.8), 4: pytest.approx(0.8)}
    assert decide(ratios, "scale", 0.05, ["small", "large"]) == ("scaled", ratios)
    assert decide([1.01, 0.98], "stop", 0.05, ["small", "large"]) == ("within tolerance", [1.0, 1.0])
    assert decide(ratios, "report", 0.05, ["small", "large"]) == ("reported only", [1.0, 1.0])
    with pytest.raises(ConfigError, match=r"small steps at 1.20x .*large steps at 0.80x.*tokenrouter calibrate"):
        decide(ratios, "stop", 0.05, ["small", "large"])


def test_reasoning_workload_lengths_are_short_reasoning_halved():
    from trserve.crossval.workloads import REASONING_OUTPUT, draw_lengths, reasoning_texts

    lengths = draw_lengths(REASONING_OUTPUT, 4000, seed=0)
    assert lengths == draw_lengths(REASONING_OUTPUT, 4000, seed=0) and min(lengths) >= 8 and max(lengths) == 1024
    assert 540 < sorted(lengths)[2000] < 660  # median 600 = 1,200 / 2
    texts = reasoning_texts(["q1?", "q2?", "q3?", "q4?", "q5?"])
    assert len(texts) == 5 and "1. q5?" in texts[4] and "4. q3?" in texts[4]


def test_predictions_come_from_the_input_repeat_and_are_scored_on_the_others(tmp_path):
    from trcore.traces import RequestTrace, TraceStep
    from trserve.config import ServeConfig
    from trserve.crossval.harness import CellRun, StepRecord
    from trserve.crossval.predict import load_calibration
    from trserve.crossval.report import markdown_table, summarize
    from trserve.crossval.run import input_runs, predict_cells

    _write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    cfg = ServeConfig.model_validate({"models": [{"name": "small", "path": "x"}, {"name": "large", "path": "y"}]})
    plan = make_plan(2, [2], default_routers()[:1], [(1, 1)], repeats=3, max_tokens=8, measure_s=10.0)
    small_only = (TraceStep(0, 0, True),) * 8
    alternating = (TraceStep(0, 1, True), TraceStep(1, 0, True)) * 4

    def run(steps, tok_s):
        traces = [RequestTrace(f"{tok_s}-{k}", steps, 20, 8) for k in range(4)]
        records = [StepRecord(0.0, 0, 2, 0.03, 2)] * 5
        timing = [(0.0, 0.1, 1.0, 8)] * 4
        ids = frozenset(t.request_id for t in traces)
        return CellRun(tok_s, int(tok_s * 10), 10.0, traces, traces, records, 4, dict.fromkeys(ids, 8), ids, timing)

    router = plan.routers[0]
    # The input repeat routes everything on the small model; the scored repeats alternate: had the scored cells
    # fed the predictors, P would show hand-offs.
    runs = [(0, router, 2, (1, 1), run(small_only, 50.0)), (1, router, 2, (1, 1), run(alternating, 40.0)),
            (2, router, 2, (1, 1), run(alternating, 44.0))]  # fmt: skip
    cells, routing, traces, _ = predict_cells(
        cfg, plan, calibration, [1.0, 1.0], runs, input_runs(plan, runs), 20, print
    )
    assert routing["markov"]["P"][0] == [1.0, 0.0]  # from repeat 0 only
    assert all(t.request_id.startswith("50.0-") for t in traces["markov"])
    (cell,) = cells
    assert cell["measured_runs"] == [40.0, 44.0] and cell["measured_tok_s"] == 42.0
    assert cell["measured_half_range"] == 2.0 and cell["input_run_tok_s"] == 50.0
    # Every step on the small model at batch 2, 20 + 4 tokens of context: 2 / (0.02 + 0.004 + 2e-6 * 48) tok/s.
    assert cell["model_tok_s"] == pytest.approx(2 / (0.024 + 2e-6 * 48), rel=0.03)
    assert cell["model_rel_error"] == pytest.approx(abs(cell["model_tok_s"] - 42.0) / 42.0)
    assert "±2.0" in markdown_table(cells, summarize(cells), None, "out of sample")


def test_replayed_traces_keep_every_request_at_its_drawn_length():
    from trcore.traces import RequestTrace, TraceStep
    from trserve.crossval.harness import CellRun
    from trserve.crossval.run import replay_traces

    step = (TraceStep(0, 0, True),)
    done, cut, empty = RequestTrace("a", step * 5, 30, 5), RequestTrace("b", step * 3, 30, 3), RequestTrace("c", (), 30)
    intended = {"a": 5, "b": 600, "c": 40}
    run = CellRun(1.0, 10, 10.0, [done], [done, cut, empty], [], 1, intended, frozenset({"a", "b", "c"}))
    replayed = replay_traces([run])
    assert [(t.request_id, t.output_length) for t in replayed] == [("a", 5), ("b", 600)]  # long b not dropped
