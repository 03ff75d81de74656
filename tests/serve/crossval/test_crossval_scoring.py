"""How crossval scores a run: real fidelity by hand, the input repeat against the scored ones, typical contexts,
drift ratios, the reasoning workload's lengths and replayed traces."""

from __future__ import annotations

import pytest

from tests.serve.synthetic_profiles import by_hand, write_profiles
from trserve.crossval.plan import default_routers, make_plan
from trserve.crossval.report import summarize


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
    assert histogram_distance({"1": 1, "2": 1}, {2: 2}) == pytest.approx(0.5)  # read back from JSON
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
    from trserve.crossval.scoring import input_runs

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

    write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    steps = [StepRecord(0.0, k, b, f * by_hand(k, b, 50), b) for k, f in ((0, 1.2), (1, 0.8)) for b in (1, 2, 4)]
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
    from trserve.crossval.report import markdown_table
    from trserve.crossval.scoring import input_runs, predict_cells

    write_profiles(tmp_path / "profiles", ["small", "large"])
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
    from trserve.crossval.scoring import replay_traces

    step = (TraceStep(0, 0, True),)
    done, cut, empty = RequestTrace("a", step * 5, 30, 5), RequestTrace("b", step * 3, 30, 3), RequestTrace("c", (), 30)
    intended = {"a": 5, "b": 600, "c": 40}
    run = CellRun(1.0, 10, 10.0, [done], [done, cut, empty], [], 1, intended, frozenset({"a", "b", "c"}))
    replayed = replay_traces([run])
    assert [(t.request_id, t.output_length) for t in replayed] == [("a", 5), ("b", 600)]  # long b not dropped
