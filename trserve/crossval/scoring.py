"""Crossval's predictions and scores: each cell predicted from the input runs (the throughput model and the
simulator, replaying the input runs' traces) and scored against the other repeats' measurements."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from trcore.traces import RequestTrace
from trserve.config import ServeConfig
from trserve.crossval.diagnose import rescaled
from trserve.crossval.fidelity import compare, memory_events, real_fidelity, sim_fidelity, step_breakdown
from trserve.crossval.harness import CellRun
from trserve.crossval.plan import CrossvalPlan, Load, Rate, RouterChoice, load_fields
from trserve.crossval.predict import (
    Calibration,
    model_predictions,
    routing_stats,
    sim_result,
    typical_context,
    typical_extend,
)
from trserve.crossval.report import add_errors
from trserve.crossval.sim_open import Replay, scored_replay
from trsim.metrics import SimResult

Progress = Callable[[str], None]
#: One measured cell: (repeat, router, load (N or rate), thresholds, what it measured).
Measured = tuple[int, RouterChoice, Load, tuple[int, ...], CellRun]


def max_batch_of(cfg: ServeConfig) -> int:
    return min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))


def input_runs(plan: CrossvalPlan, runs: Sequence[Measured]) -> tuple[list[Measured], list[Measured]]:
    """``(inputs, scored)``: the first repeat and the others with two or more repeats, else all runs twice."""
    if plan.repeats < 2:
        return list(runs), list(runs)
    return [m for m in runs if m[0] == 0], [m for m in runs if m[0] > 0]


def replay_traces(runs: Sequence[CellRun]) -> list[RequestTrace]:
    """The traces the simulator replays: every recorded request's, with its drawn full length: a finished
    full-length request as it ran; one cut off at the end of its cell, or a session's shortened first request,
    with the length it was drawn with (when the request outlives its trace it goes on with the next one's),
    so long requests are not under-represented (few of them finish inside a window) and every session's routing
    is sampled."""
    out = []
    for run in runs:
        finished = {t.request_id for t in run.finished}
        for t in run.traces:
            if t.request_id in finished:
                out.append(t)
            elif t.steps and t.request_id in run.intended_tokens:
                out.append(replace(t, num_output_tokens=run.intended_tokens[t.request_id]))
    return out or [t for run in runs for t in run.traces]


def predict_cells(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    calibration: Calibration,
    factors: Sequence[float],
    runs: Sequence[Measured],
    split: tuple[list[Measured], list[Measured]],
    sim_s: float,
    progress: Progress,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, list[RequestTrace]], dict[str, Any]]:
    """Predict each cell from the input runs (latencies scaled by the drift ``factors``) and score the
    predictions against the scored runs; returns cells, routing inputs, replayed traces and P, C per router."""
    cap = max_batch_of(cfg)
    inputs, scored = split
    predictor = rescaled(calibration, factors)
    cells: list[dict[str, Any]] = []
    routing: dict[str, Any] = {}
    traces: dict[str, list[RequestTrace]] = {}
    stats_by_router: dict[str, Any] = {}
    for router in plan.routers:
        mine = [run for (_, r, _, _, run) in inputs if r.name == router.name]
        finished = [t for run in mine for t in run.finished] or [t for run in mine for t in run.traces]
        traces[router.name] = replay = replay_traces(mine)
        stats = stats_by_router[router.name] = routing_stats(finished, cfg.num_models, cfg.entry_model)
        lengths = [t.output_length for t in replay]
        context = typical_context(replay, lengths)
        extend = typical_extend(finished, cfg.num_models)
        routing[router.name] = {**stats.to_dict(), "typical_context": context, "typical_extend": extend}
        for load in plan.loads:
            vectors = plan.vectors(load)
            model_tok_s: dict[tuple[int, ...], float | None] = dict.fromkeys(vectors)  # closed loop only
            if not isinstance(load, Rate):
                model_tok_s |= model_predictions(stats, predictor, load, vectors, context, cap, extend)
            sim_load: int | Replay = load
            if isinstance(load, Rate):  # the scored arrivals, the server's admission limit, the input's send lag
                lag = send_lag(inputs, router.name, load)
                sim_load = scored_replay(plan, load, cfg.server.max_active_requests, lag)
            for b in vectors:
                sim = sim_result(replay, predictor, sim_load, b, cap, sim_s)
                cell = score_cell(cfg, plan, router.name, load, b, runs, scored, calibration, context, extend)
                cell["model_tok_s"] = model_tok_s[b]
                cells.append(add_simulation(cell, sim, sim_load, cfg.entry_model))
            progress(f"predicted {router.name} {load if isinstance(load, Rate) else f'N={load}'}")
    return cells, routing, traces, stats_by_router


def add_simulation(cell: dict[str, Any], sim: SimResult, sim_load: int | Replay, entry_model: int) -> dict[str, Any]:
    """``cell`` with the simulator's figures (throughput, the arrivals a rate cell replayed, memory, fidelity beside
    the real side's) and every predictor's error."""
    cell["sim_tok_s"] = sim.throughput_tok_s
    cell |= sim_load.to_dict() if isinstance(sim_load, Replay) else {}
    cell["memory"]["sim"] = (sim.extra or {}).get("kv")
    cell["fidelity"]["sim"] = sim_fidelity(sim, entry_model)
    cell["fidelity"]["sim_vs_real"] = compare(cell["fidelity"]["real"], cell["fidelity"]["sim"])
    return add_errors(cell)


def send_lag(inputs: Sequence[Measured], router: str, rate: Rate) -> float:
    """The input runs' median send lag at ``rate`` (0 without one): how late their open-loop client sent."""
    lags = [x for (_, r, load, _, run) in inputs if r.name == router and load == rate for x in run.send_lags]
    return statistics.median(lags) if lags else 0.0


def score_cell(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    router: str,
    load: Load,
    b: tuple[int, ...],
    runs: Sequence[Measured],
    scored: Sequence[Measured],
    calibration: Calibration,
    context: int,
    extend: Sequence[float],
) -> dict[str, Any]:
    """The measured side of one cell: the scored repeats' throughput (mean and half range), the input repeat's
    (for reference), the step breakdown and the real fidelity quantities."""
    mine = [run for (_, r, nn, bb, run) in scored if r.name == router and nn == load and bb == b]
    if not mine:
        raise ValueError(f"no scored run of {router} load {load} B={b}")
    given = [run for (rep, r, nn, bb, run) in runs if r.name == router and nn == load and bb == b and rep == 0]
    values = [run.throughput_tok_s for run in mine]
    offered = [run.offered_rps for run in mine if run.offered_rps is not None]  # open loop: the window's arrivals
    steps = [s for run in mine for s in run.steps]
    breakdown = step_breakdown(steps, cfg.num_models, plan.measure_s * len(mine))
    return {
        "router": router,
        **load_fields(load),
        **({"offered_rps": statistics.fmean(offered)} if offered else {}),
        "thresholds": list(b),
        "measured_tok_s": statistics.fmean(values),
        "measured_runs": values,
        "measured_half_range": (max(values) - min(values)) / 2,
        "input_run_tok_s": given[0].throughput_tok_s if plan.repeats >= 2 and given else None,
        "steps": breakdown,
        "profile_step_s_at_mean_batch": [
            calibration.table(m, max(1, round(s["mean_batch"])), context, extend[m])[-1]
            for m, s in enumerate(breakdown)
        ],
        "fidelity": {"real": real_fidelity(mine, cfg.num_models, cfg.entry_model)},
        "memory": {"real": memory_events([run.steps for run in mine], cfg.num_models)},
    }
