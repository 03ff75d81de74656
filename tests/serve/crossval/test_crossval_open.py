"""`tokenrouter crossval --rate`: open-loop cells. Bad options, the plan's rate cells, the simulator replaying the
scored repeats' arrivals, the open-loop client on a stand-in front end, the predictions and the report with rate
cells beside closed-loop ones, and one short run on emulated engines."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import traceback
from dataclasses import replace

import pytest
import typer
from typer.testing import CliRunner

from tests.serve.crossval.test_crossval import check_repredicted_as_written
from tokenrouter.commands.crossval import crossval
from trcore.traces import RequestTrace, TraceStep
from trserve.bench.arrivals import Arrivals, poisson
from trserve.crossval.client import ClientWorkload
from trserve.crossval.diagnose import add_rescaled_predictions
from trserve.crossval.harness import CellRun, StepRecord
from trserve.crossval.open_client import OpenClient, cell_arrivals, draw_arrivals
from trserve.crossval.plan import Rate, default_routers, make_plan
from trserve.crossval.predict import Calibration, routing_stats, sim_result
from trserve.crossval.report import markdown_table, summarize
from trserve.crossval.sim_open import TRACE_ASSIGNMENTS, replay_of, scored_replay
from trserve.frontend.generation import Overloaded
from trsim.latency import ConstantModel

app = typer.Typer()
app.command()(crossval)
runner = CliRunner()
EMULATED = "configs/emulated-r2r-a100.yaml"


@pytest.mark.parametrize(
    ("args", "message"),
    [(["-n", "2", "--rate", "5"], "--rate: sets the open loop; --concurrency the closed loop"),
     (["--rate", "0"], "--rate: must be finite and > 0"), (["--rate", "fast"], "--rate: must be comma-separated"),
     (["--rate", "5,inf"], "--rate: must be finite"), (["--arrival-seed", "3"], "--arrival-seed: seeds the Poisson"),
     (["--rate", "1e-9"], "--rate: 1e-09 requests/s expects 1.2e-08 arrivals in the 12 s measured window"),
     (["--rate", "5,5"], "--rate: 5 requests/s is given twice"),
     (["--rate", "5", "--sim-s", "30"], "--sim-s: sizes the closed-loop cells, which --rate replaces"),
     (["--rate", "5", "--full-grid-max-n", "8"], "--full-grid-max-n: sizes the closed-loop cells")],
)  # fmt: skip
def test_bad_open_loop_options_are_one_line_exit_2(args, message):
    result = runner.invoke(app, ["--config", EMULATED, *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_rate_cells_run_the_given_vectors_or_every_threshold_1():
    plan = make_plan(2, [], default_routers()[:1], [(1, 1), (2, 2)], rates=[20, 5.5], arrival_seed=7, repeats=2)
    assert plan.loads == (Rate(20.0), Rate(5.5)) and plan.arrival_seed == 7
    assert plan.vectors(Rate(5.5)) == [(1, 1), (2, 2)]  # (2, 2) is no closed-loop N = 1 vector; at a rate it runs
    assert plan.num_cells == 2 * 2 * 2 and plan.cells()[1] == (0, plan.routers[0], Rate(20.0), (2, 2))
    assert make_plan(2, [], default_routers()[:1], None, rates=[3]).vectors(Rate(3.0)) == [(1, 1)]
    assert make_plan(2, [4], default_routers()[:1], None).rates == ()  # closed loop as before


def test_the_simulator_replays_the_scored_repeats_arrivals_over_the_cells_window():
    # 8-token requests all on a 10 ms small model at 20 requests/s: every active request is in every step, so a
    # request commits its 8 tokens within 90 ms of its arrival (a step in progress, then 8). Each scored repeat's
    # draw (seeds 4 + 1, 4 + 2) is replayed over 0.5 + 3 s, its tokens counted in [0.5, 3.5) only, once per
    # assignment of the traces: 8 assignments of 4 traces are the 4 offsets 0-3, so 2 x 4 runs.
    traces = [RequestTrace(f"r{k}", (TraceStep(0, 0, True),) * 8, 20, 8) for k in range(4)]
    calibration = Calibration(("a", "b"), (ConstantModel(0.010), ConstantModel(0.020)))
    plan = make_plan(2, [], default_routers()[:1], [(1, 1)], rates=[20], repeats=3, arrival_seed=4, warmup_s=0.5,
                     measure_s=3.0)  # fmt: skip
    replay = scored_replay(plan, Rate(20.0))
    assert replay.seeds == (5, 6) and replay_of(replay.to_dict() | {"rate_rps": 20.0}) == replay
    result = sim_result(traces, calibration, replay, (1, 1), 8, 30.0)  # sim_s is the closed loop's only
    draws = [draw_arrivals(20.0, 0.5, 3.0, seed).times_s for seed in (5, 6)]
    assert draws[0] == cell_arrivals(20.0, ClientWorkload(((1,),), 8, 0.5, 3.0), 5).times_s  # the real side's
    runs = [times for times in draws for _ in range(4)]  # window-major
    assert replay.assignments == 8 and len(result.extra["windows_tok_s"]) == 8
    for times, tok_s in zip(runs, result.extra["windows_tok_s"], strict=True):
        inside = sum(t >= 0.5 and t + 0.09 < 3.5 for t in times)  # every token in the window
        touching = sum(t + 0.09 >= 0.5 and t < 3.5 for t in times)  # some token in the window
        assert 8 * inside / 3.0 <= tok_s <= 8 * touching / 3.0
    assert result.throughput_tok_s == pytest.approx(sum(result.extra["windows_tok_s"]) / 8)
    assert result.simulated_s == pytest.approx(8 * 3.5)
    # Every arrival finishes, or is still running at the end: then it arrived in the window's last 90 ms.
    backlog = result.extra["backlog_at_end"]
    assert result.num_finished + sum(backlog) == sum(map(len, runs)) == result.num_finished + result.num_unfinished
    assert all(n <= sum(t + 0.09 >= 3.5 for t in times) for n, times in zip(backlog, runs, strict=True))
    assert 8 * 0.010 <= result.latency_p50_s <= result.latency_p99_s <= 0.09 + 1e-9
    assert result.extra["breakdown"]["num_requests"] == result.num_finished
    with pytest.raises(TypeError, match="replays arrival times"):
        sim_result(traces, calibration, Rate(20.0), (1, 1), 8, 30.0)


def test_the_replayed_arrivals_wait_for_the_servers_admission_limit():
    # The same 8-token, 10 ms requests admitted one at a time: each runs alone for 80 ms from the later of its
    # arrival and the previous one's end (arrivals 50 ms apart on average, so a queue builds), latencies from
    # arrival: the requests finished by the window's end are those the recursion puts before it.
    traces = [RequestTrace(f"r{k}", (TraceStep(0, 0, True),) * 8, 20, 8) for k in range(4)]
    calibration = Calibration(("a", "b"), (ConstantModel(0.010), ConstantModel(0.020)))
    plan = make_plan(2, [], default_routers()[:1], [(1, 1)], rates=[20], repeats=2, arrival_seed=4, warmup_s=0.5,
                     measure_s=3.0)  # fmt: skip
    replay = replace(scored_replay(plan, Rate(20.0), max_active=1), assignments=1)  # identical traces: one will do
    assert replay_of(replay.to_dict() | {"rate_rps": 20.0}) == replay and replay.to_dict()["sim_max_active"] == 1
    result = sim_result(traces, calibration, replay, (1, 1), 8, 30.0)
    times = draw_arrivals(20.0, 0.5, 3.0, 5).times_s  # the scored repeat's (seed 4 + 1)
    latencies, end = [], 0.0
    for t in times:
        end = max(t, end) + 0.08
        latencies.append(end - t)
    finished = [lat for lat, t in zip(latencies, times, strict=True) if t + lat <= 3.5]
    assert abs(result.num_finished - len(finished)) <= 1  # a request ending exactly at the window's edge
    assert result.latency_p99_s == pytest.approx(sorted(finished)[int(0.99 * (len(finished) - 1))], rel=0.05)
    assert result.latency_p99_s > 0.2  # far beyond one request's 80 ms: they queued for admission


class _FrontEnd:
    """Answers even requests at once (3 tokens) and never answers odd ones."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, spec, prompt, _extra):
        self.submitted.append(spec.request_id)
        gen = type("Gen", (), {"events": asyncio.Queue()})()
        if int(spec.request_id.rsplit("-", 1)[1]) % 2 == 0:
            gen.events.put_nowait(("tokens", [1, 2, 3]))
            gen.events.put_nowait(("done", None))
        return gen


def test_the_open_client_sends_at_the_arrival_times_and_cancels_the_unfinished():
    workload = ClientWorkload(((1, 2), (3, 4, 5)), 3, 0.0, 0.1)
    arrivals = Arrivals((0.0, 0.01, 0.02, 0.03), "test")
    frontend = _FrontEnd()
    client = OpenClient(frontend, workload, "t", arrivals)

    async def drive():
        start = time.monotonic() - 1.0  # every arrival is due at once
        tasks = client.start(start)
        await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return start

    start = asyncio.run(drive())
    assert frontend.submitted == ["t-0", "t-1", "t-2", "t-3"] and client.num_sent == 4
    assert client.finished == {"t-0", "t-2"} and client.full_length == {"t-0", "t-1", "t-2", "t-3"}
    assert [client.timings[r][0] for r in ("t-0", "t-2")] == [start, start + 0.02]  # latency from the arrival
    assert client.timings["t-2"][3] == 3 and client.specs["t-3"].arrival_time == start + 0.03
    assert client.specs["t-1"].num_prompt_tokens == 3 and not client._requests  # the odd ones were cancelled
    # Sent about a second after their arrival times: each send's lag is that second, less its arrival's offset.
    assert len(client.send_lags) == 4
    assert all(1.0 - 0.01 * k <= lag < 1.0 - 0.01 * k + 0.05 for k, lag in enumerate(client.send_lags))


class _FullFrontEnd(_FrontEnd):
    """Refuses every request after the first two, as a front end whose waiting queue is full."""

    def submit(self, spec, prompt, extra):
        if len(self.submitted) >= 2:
            raise Overloaded("256 requests are already waiting (limit 256)")
        return super().submit(spec, prompt, extra)


def test_refused_requests_are_counted_and_raise_no_task_exception():
    workload = ClientWorkload(((1, 2),), 3, 0.0, 0.1)
    client = OpenClient(_FullFrontEnd(), workload, "t", Arrivals((0.0, 0.0, 0.0, 0.0, 0.0), "test"))

    async def drive():
        loop_errors = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        tasks = client.start(time.monotonic() - 1.0)
        await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return loop_errors

    assert asyncio.run(drive()) == []
    assert client.num_refused == 3 and client.num_sent == 5 and client.finished == {"t-0"}
    assert client.error == "refused: 256 requests are already waiting (limit 256)"


def _run(tok_s, offered=None, send_lags=()):
    traces = [RequestTrace(f"{tok_s}-{k}", (TraceStep(0, 1, True), TraceStep(1, 0, True)) * 4, 20, 8) for k in range(4)]
    ids = frozenset(t.request_id for t in traces)
    records, timing = [StepRecord(0.0, 0, 2, 0.03, 2)] * 5, [(0.0, 0.1, 1.0, 8)] * 4
    return CellRun(tok_s, int(tok_s * 10), 10.0, traces, traces, records, 4, dict.fromkeys(ids, 8), ids, timing,
                   offered_rps=offered, send_lags=list(send_lags))  # fmt: skip


def test_rate_cells_have_the_simulator_but_not_the_throughput_model():
    from trserve.config import ServeConfig
    from trserve.crossval.scoring import input_runs, predict_cells

    cfg = ServeConfig.model_validate({"models": [{"name": "small", "path": "x"}, {"name": "large", "path": "y"}]})
    calibration = Calibration(("a", "b"), (ConstantModel(0.010), ConstantModel(0.020)))
    plan = make_plan(2, [2], default_routers()[:1], [(1, 1)], rates=[5], repeats=2, measure_s=10.0)
    router = plan.routers[0]
    lags = {0: (0.001, 0.004, 0.002), 1: (0.5, 0.5, 0.5)}  # the scored repeat's are not the simulator's input
    runs = [(rep, router, load, (1, 1), _run(40.0 + rep, *((None, ()) if load == 2 else (4.5 + rep, lags[rep]))))
            for rep in range(2) for load in plan.loads]  # fmt: skip
    cells, _, traces, _ = predict_cells(cfg, plan, calibration, [1.0, 1.0], runs, input_runs(plan, runs), 20, print)
    closed, rate = cells
    assert closed["concurrency"] == 2 and "rate_rps" not in closed and closed["model_tok_s"] > 0
    assert rate["concurrency"] is None and rate["rate_rps"] == 5.0 and rate["offered_rps"] == 5.5
    assert rate["model_tok_s"] is None and rate["model_rel_error"] is None and rate["sim_tok_s"] > 0
    summary = summarize(cells)["markov"]
    assert summary["model_max_rel_error"] == closed["model_rel_error"]  # the rate cell is skipped
    assert summary["sim_max_rel_error"] == max(closed["sim_rel_error"], rate["sim_rel_error"])
    assert summary["best_by_n"]["5 req/s"] == {"model": None, "sim": None}  # throughput ranks no vector at a rate
    assert summary["best_by_n"]["2"]["sim"]["matches"] and summary["sim_best_matches"] is True
    assert "| markov | 5 req/s (5.5 offered) | (1, 1) | 41.0 | – | – |" in markdown_table(cells, {"markov": summary})
    assert rate["sim_arrivals"] == "the scored repeat's" and rate["sim_arrival_seeds"] == [1]  # repeat 1's draw
    assert rate["sim_window_s"] == [3.0, 13.0] and "sim_arrivals" not in closed
    assert rate["sim_max_active"] == cfg.server.max_active_requests  # the server's admission limit
    assert rate["sim_send_lag_s"] == 0.002  # the input repeat's median send lag at this rate
    stats = {"markov": routing_stats(traces["markov"], 2, 0)}
    add_rescaled_predictions([rate], stats, traces, calibration, {"markov": (28, [0.0, 0.0])}, 8, 20)
    assert rate["sim_rescaled_tok_s"] > 0 and rate["model_rescaled_tok_s"] is None  # the same arrivals, rescaled
    only_rates = summarize([rate])["markov"]
    assert only_rates["model_median_rel_error"] is None and only_rates["model_best_matches"] is None
    assert only_rates["sim_median_rel_error"] == rate["sim_rel_error"] and only_rates["sim_best_matches"] is None


@pytest.mark.serve
def test_emulated_open_loop_run(tmp_path):
    out = tmp_path / "out"
    args = ["--config", EMULATED, "--rate", "20", "--thresholds", "1,1", "--routers", "markov",
            "--markov-p", "[[0.65,0.35],[1,0]]", "--markov-c", "[[1,0],[1,0]]", "--max-tokens", "16",
            "--warmup-s", "0.3", "--measure-s", "2", "--repeats", "1", "--drift", "skip",
            "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    assert "model n/a (open loop)" in result.output
    doc = json.loads((out / "crossval.json").read_text())
    (cell,) = doc["cells"]
    assert (cell["concurrency"], cell["rate_rps"], cell["thresholds"]) == (None, 20.0, [1, 1])
    assert cell["measured_tok_s"] > 0 and cell["sim_tok_s"] > 0 and cell["model_tok_s"] is None
    sent = len(poisson(20.0, 2.3, 0).times_s)  # repeat 0 draws --arrival-seed 0 over warm-up and window
    assert 0 < cell["offered_rps"] * 2 <= sent
    real, sim = cell["fidelity"]["real"], cell["fidelity"]["sim"]
    assert sent // 3 <= real["num_requests"] <= sent  # every arrival is sent; most 16-token requests finish
    for side in (real, sim):
        for metric in ("ttft", "tpot", "e2e"):
            assert 0 < side[f"{metric}_p50"] <= side[f"{metric}_p99"], metric
    assert real["breakdown"]["num_requests"] == real["num_requests"]
    assert sim["breakdown"]["num_requests"] == sim["num_requests"] > 0
    assert doc["plan"]["rates"] == [20.0] and doc["summary"]["markov"]["model_median_rel_error"] is None
    assert "| markov | 20 req/s (" in (out / "crossval.md").read_text()
    assert cell["sim_trace_assignments"] == TRACE_ASSIGNMENTS
    check_repredicted_as_written(out, doc)


@pytest.mark.parametrize("module", ["trserve.crossval.repredict", "trserve.crossval.rediagnose"])
def test_a_written_run_command_refuses_a_bad_folder_in_one_line(tmp_path, module):
    for args, message in (([str(tmp_path)], "holds no crossval.json"), ([], "usage: python -m")):
        done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
