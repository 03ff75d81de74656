"""Crossval's stack probe: the serving stack's costs summarized from step reports, the simulator running with
them, ``stack.json`` read back, bad ``--stack`` input, and one emulated run that probes before its cell."""

from __future__ import annotations

import json
import traceback
from dataclasses import replace
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from tokenrouter.commands.crossval import crossval
from trcore import RequestSpec, RouteEvent
from trcore.errors import ConfigError
from trcore.traces import RequestTrace, TraceStep
from trserve.crossval.harness import StepRecord, turnarounds
from trserve.crossval.predict import Calibration, sim_result
from trserve.crossval.stack import (
    StackCosts,
    StackProbe,
    costs_for_sim,
    costs_from_steps,
    host_gap_line,
    load_stack,
    stack_from_doc,
    summarize_steps,
)
from trsim.latency import ConstantModel

app = typer.Typer()
app.command()(crossval)
runner = CliRunner()
EMULATED = "configs/emulated-r2r-a100.yaml"


def step(model, batch=1, gap=None, received=0, transit=0.0, step_s=0.006, emulated=None):
    return StepRecord(0.0, model, batch, step_s, batch, 0, received, transit, 0, gap, emulated)


# Model 0: gaps 1, 2, 4 ms (and one step after an idle loop); hand-offs in two reports: three messages at 1 ms
# each, then one at 5 ms; emulated 6 ms steps that took 0.1, 0.3, 0.2, 0.2 ms longer. Model 1: stepped only
# after idling, received nothing, not emulated.
STEPS = [
    step(0, batch=1, gap=None, received=3, transit=0.003, step_s=0.0061, emulated=0.006),
    step(0, batch=1, gap=0.001, step_s=0.0063, emulated=0.006),
    step(0, batch=2, gap=0.002, received=1, transit=0.005, step_s=0.0062, emulated=0.006),
    step(0, batch=2, gap=0.004, step_s=0.0062, emulated=0.006),
    step(1, batch=1, gap=None),
]


def test_host_gaps_and_transits_are_medians_over_steps_and_messages():
    small, large = summarize_steps(STEPS, ["small", "large"])
    assert small["num_host_gaps"] == 3 and small["host_gap_median_s"] == pytest.approx(0.002)
    assert small["host_gap_mean_s"] == pytest.approx(0.007 / 3)
    assert small["host_gap_median_s_by_batch"] == pytest.approx({"1": 0.001, "2": 0.003})
    # Per message: 1, 1, 1, 5 ms -> median 1 ms (the two reports' means alone would give 3 ms).
    assert small["num_handoffs_received"] == 4 and small["handoff_transit_median_s"] == pytest.approx(0.001)
    assert small["handoff_transit_mean_s"] == pytest.approx(0.002)
    assert small["step_overrun_median_s"] == pytest.approx(0.0002)
    assert large["num_steps"] == 1 and large["host_gap_median_s"] is None and large["handoff_transit_median_s"] is None
    assert large["step_overrun_median_s"] is None


def test_costs_take_the_medians_and_zero_without_samples():
    costs = costs_from_steps(STEPS, ["small", "large"], [0.004, 0.001, 0.002], {"source": "probe"})
    # Model 0's gaps at batches 1 and 2 (medians 1 and 3 ms, one and two steps) make a line; its fit crosses 0
    # below one request, so it runs through the origin: (1 * 1 * 1 + 2 * 2 * 3) / (1 * 1 + 2 * 4) ms per request.
    assert costs.host_gap_s == pytest.approx((0.0, 0.0)) and costs.per_request_s == pytest.approx((0.013 / 9, 0.0))
    assert costs.handoff_transit_s == pytest.approx((0.001, 0.0))
    assert costs.client_turnaround_s == pytest.approx(0.002) and costs.source["client"]["num_turnarounds"] == 3
    assert costs_from_steps(STEPS, ["small", "large"], [], {}).client_turnaround_s == 0.0
    assert costs.step_overrun_s == pytest.approx((0.0002, 0.0))
    # The simulator's model is busy for the host gap plus the overrun after each step; not with a drift probe.
    assert costs.sim_fields()["host_overhead_s"] == pytest.approx((0.0002, 0.0))
    assert costs.sim_fields()["host_overhead_per_request_s"] == costs.per_request_s
    assert costs.sim_fields()["transfer_delay_s"] == costs.handoff_transit_s
    scaled = costs_for_sim(costs, drift_scaled=True)
    assert scaled.sim_fields()["host_overhead_s"] == costs.host_gap_s and scaled.source["step_overrun_not_added"]
    assert costs_for_sim(costs, drift_scaled=False) == costs and costs_for_sim(StackProbe(), False) is None
    assert stack_from_doc(json.loads(json.dumps(costs.to_dict()))) == costs
    assert stack_from_doc({"source": "none: the simulator's stack is ideal"}) is None


def test_host_gap_line_per_request():
    line = host_gap_line({"1": 0.0003, "2": 0.0004, "4": 0.0006}, {"1": 5, "2": 1, "4": 9})
    assert line == pytest.approx((0.0002, 0.0001))
    assert host_gap_line({"1": 0.0003}, {"1": 4}) is None  # one batch size: no line
    assert host_gap_line({"1": 0.0004, "3": 0.0002}, {"1": 1, "3": 1}) == pytest.approx((0.0003, 0.0))


def test_the_simulator_adds_per_request_host_time_and_delivers_later():
    traces = [RequestTrace(f"r{k}", (TraceStep(0, 0, True),) * 8, 20, 8) for k in range(4)]
    latency = (ConstantModel(0.010), ConstantModel(0.020))
    base = StackCosts((0.002, 0.0), (0.0, 0.0))
    plain = sim_result(traces, Calibration(("a", "b"), latency, base), 2, (1, 1), 8, 5.0)
    per_request = replace(base, per_request_s=(0.001, 0.0))
    busier = sim_result(traces, Calibration(("a", "b"), latency, per_request), 2, (1, 1), 8, 5.0)
    assert busier.throughput_tok_s == pytest.approx(2 / (0.010 + 0.002 + 2 * 0.001), rel=0.01)
    later = sim_result(traces, Calibration(("a", "b"), latency, replace(base, delivery_s=0.003)), 2, (1, 1), 8, 5.0)
    assert later.throughput_tok_s == pytest.approx(plain.throughput_tok_s)  # delivery moves latencies only
    assert later.ttft_p50_s == pytest.approx(plain.ttft_p50_s + 0.003)
    assert later.latency_p99_s == pytest.approx(plain.latency_p99_s + 0.003)
    assert later.tpot_p50_s == pytest.approx(plain.tpot_p50_s)
    assert later.extra["breakdown"]["mean_ms"]["delivery"] == pytest.approx(3.0)


def test_the_simulator_adds_the_stack_costs_to_every_step_and_request():
    # Two sessions in step on the small model (10 ms steps), 8 tokens per request: one step of both every
    # 10 ms + 2 ms of host gap. With a 5 ms turnaround the next pair comes 5 ms after a pair ends (the model
    # idles from 2 ms after it): a cycle of 8 steps, 7 gaps and the turnaround.
    traces = [RequestTrace(f"r{k}", (TraceStep(0, 0, True),) * 8, 20, 8) for k in range(4)]
    latency = (ConstantModel(0.010), ConstantModel(0.020))
    ideal = sim_result(traces, Calibration(("a", "b"), latency), 2, (1, 1), 8, 5.0)
    stack = StackCosts((0.002, 0.0), (0.0005, 0.0005))
    costly = sim_result(traces, Calibration(("a", "b"), latency, stack), 2, (1, 1), 8, 5.0)
    turning = replace(stack, client_turnaround_s=0.005)
    slower = sim_result(traces, Calibration(("a", "b"), latency, turning), 2, (1, 1), 8, 5.0)
    assert ideal.throughput_tok_s == pytest.approx(2 / 0.010, rel=0.01)
    assert costly.throughput_tok_s == pytest.approx(2 / 0.012, rel=0.01)
    assert slower.throughput_tok_s == pytest.approx(2 * 8 / (8 * 0.010 + 7 * 0.002 + 0.005), rel=0.01)


def test_turnaround_runs_from_the_last_step_to_the_sessions_next_submission():
    client = SimpleNamespace(
        successor={"a": "b", "b": "c", "x": "y"},
        specs={k: RequestSpec(k, 1, 1, frozenset(), t) for k, t in (("b", 10.004), ("c", 10.2), ("y", 11.0))},
    )
    events = [RouteEvent("a", 0, 1, False, 10.001), RouteEvent("a", 1, -1, True, 10.003),
              RouteEvent("b", 0, -1, True, 10.199)]  # fmt: skip
    assert turnarounds(events, client) == pytest.approx([0.001, 0.001])  # x: no step recorded


def test_a_written_stack_file_reads_back(tmp_path):
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"host_gap_s": [0.0003, 0.0002], "handoff_transit_s": [0.0004, 0.0001], "x": 1}))
    costs = load_stack(path, 2)
    assert costs.host_gap_s == (0.0003, 0.0002) and costs.handoff_transit_s == (0.0004, 0.0001)
    assert costs.source["source"] == f"file {path}" and costs.source["read_from"]["x"] == 1
    assert costs.client_turnaround_s == 0.0 and costs.step_overrun_s == ()  # a file from before they were measured


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is not a file"),
        ("{not json", "needs JSON with host_gap_s"),
        ('{"host_gap_s": [0.1, 0.1]}', "needs JSON with host_gap_s"),
        ('{"host_gap_s": [0.1], "handoff_transit_s": [0.1]}', "host_gap_s needs one value per model (2)"),
        ('{"host_gap_s": [0.1, -1], "handoff_transit_s": [0, 0]}', "must be finite seconds >= 0"),
        ('{"host_gap_s": [0.1, "x"], "handoff_transit_s": [0, 0]}', "must be finite seconds >= 0"),
        ('{"host_gap_s": [0, 0], "handoff_transit_s": [0, 0], "client_turnaround_s": -1}', "client_turnaround_s"),
        ('{"host_gap_s": [0, 0], "handoff_transit_s": [0, 0], "step_overrun_s": [0]}', "step_overrun_s needs one"),
        ("[1, 2]", "needs JSON with host_gap_s"),
    ],
)
def test_bad_stack_files_are_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "stack.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match="--stack"):
        load_stack(path, 2)
    result = runner.invoke(app, ["--config", EMULATED, "--routers", "markov", "--stack", str(path)])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.serve
def test_emulated_run_probes_the_stack_before_its_cell(tmp_path):
    out = tmp_path / "out"
    args = ["--config", EMULATED, "-n", "4", "--thresholds", "1,1", "--routers", "markov", "--max-tokens", "16",
            "--warmup-s", "0.3", "--measure-s", "1", "--repeats", "1", "--drift", "skip", "--sim-s", "5",
            "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    written = json.loads((out / "stack.json").read_text())
    doc = json.loads((out / "crossval.json").read_text())
    assert doc["stack"] == written and written["source"] == "probe" and written["probe"]["concurrency"] == 2
    assert written["probe"]["measure_s"] == 1.0 and written["command"].startswith("tokenrouter ")  # its argv
    small, large = written["models"]
    assert small["num_steps"] > 0 and large["num_steps"] > 0
    # Both models step back to back at times (the other's hand-offs keep them busy): their loops' gaps are in.
    assert all(0 < m["num_host_gaps"] <= m["num_steps"] for m in (small, large))  # at most one gap per step
    assert written["probe"]["concurrencies"] == [2, 4]  # and the plan's largest: gaps at more batch sizes
    for m, gap, per_request in zip((small, large), written["host_gap_s"], written["per_request_s"], strict=True):
        line = host_gap_line(m["host_gap_median_s_by_batch"], m["host_gap_counts_by_batch"])
        assert [gap, per_request] == (list(line) if line else [m["host_gap_median_s"], 0.0])
    # Delivery: a finished request's last step to the client's receipt, a median over both probe windows.
    assert written["client"]["num_deliveries"] > 0 and 0 < written["delivery_s"] < 0.3 + 1.0
    for m in (small, large):  # the median of all gaps lies between the per-batch-size medians
        by_batch = m["host_gap_median_s_by_batch"].values()
        assert min(by_batch) <= m["host_gap_median_s"] <= max(by_batch), m
    # The markov router hands off both ways: each model received hand-offs, and their transit is what the
    # simulator's hand-offs to that model take.
    assert small["num_handoffs_received"] > 0 and large["num_handoffs_received"] > 0
    assert written["handoff_transit_s"] == [small["handoff_transit_median_s"], large["handoff_transit_median_s"]]
    # A turnaround (a request's last step to its session's next submission) lies inside the probe's run.
    assert written["client"]["num_turnarounds"] > 0 and 0 < written["client_turnaround_s"] < 0.3 + 1.0
    assert written["step_overrun_s"] == [max(0.0, m["step_overrun_median_s"]) for m in (small, large)]
    assert "Simulator's stack costs: host gap" in (out / "crossval.md").read_text()
    # The same cell again, with the written stack costs instead of a probe: no stack.json of its own.
    again = tmp_path / "again"
    args[args.index("--out") + 1] = str(again)
    result = runner.invoke(app, [*args, "--stack", str(out / "stack.json")])
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    read = json.loads((again / "crossval.json").read_text())["stack"]
    assert read["source"] == f"file {out / 'stack.json'}" and read["host_gap_s"] == written["host_gap_s"]
    assert not (again / "stack.json").exists() and "stack probe" not in result.output
