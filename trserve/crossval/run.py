"""One cross-validation run: probe the engines' drift from their profiles, measure every cell on the real server,
then predict each cell with the throughput model and the simulator, and write JSON, markdown and a figure.

Out of sample: with two or more repeats, the first repeat of every cell is the input run (routing statistics,
typical context and appended tokens, and the traces the simulator replays come from it) and the predictions
are scored against the other repeats only. With one repeat the inputs come from the scored cells themselves,
and the summary says so (``out_of_sample: false``)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from trcore import BatchingPolicy
from trcore.traces import RequestTrace, trace_to_dict
from trserve import eventloop
from trserve.config import ServeConfig
from trserve.crossval.diagnose import add_rescaled_predictions, rescaled
from trserve.crossval.drift import probe_drift, serving_probe
from trserve.crossval.fidelity import (
    compare,
    memory_events,
    real_fidelity,
    sim_fidelity,
    step_breakdown,
    summarize_fidelity,
)
from trserve.crossval.harness import CellRun, ClientWorkload, crossval_server, run_cell
from trserve.crossval.messages import ProgramChoice
from trserve.crossval.open_client import cell_arrivals
from trserve.crossval.plan import CrossvalPlan, Load, Rate, RouterChoice, load_fields, load_tag
from trserve.crossval.predict import (
    Calibration,
    kv_for_sim,
    memory_note,
    model_predictions,
    routing_stats,
    sim_result,
    typical_context,
    typical_extend,
)
from trserve.crossval.report import add_errors, drift_line, markdown_table, plot_cells, summarize
from trserve.crossval.sim_open import Replay, scored_replay
from trserve.crossval.stack import (
    STACK_FILE,
    StackCosts,
    StackProbe,
    costs_for_sim,
    probe_concurrencies,
    probe_stack,
    stack_line,
)
from trserve.server.drift import DEFAULT_TOLERANCE, DriftReport

Progress = Callable[[str], None]
#: One measured cell: (repeat, router, load (N or rate), thresholds, what it measured).
Measured = tuple[int, RouterChoice, Load, tuple[int, ...], CellRun]


def max_batch_of(cfg: ServeConfig) -> int:
    return min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))


def program_factory(router: RouterChoice, num_models: int) -> Callable[[int], ProgramChoice]:
    """Every model's program for ``router``'s cells (its parameters checked here, before any cell runs)."""
    choice = ProgramChoice.of(router.program, router.params)
    choice.create(0, num_models)
    return lambda m: choice


async def measure(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    workload: ClientWorkload,
    probe: Callable[[Any], Any] | None,
    progress: Progress,
    stack: StackProbe | None = None,
) -> tuple[list[Measured], DriftReport | None, StackCosts | None, dict[int, int]]:
    """Run the drift probe (``probe(frontend)``, if any), the stack probe (if ``stack``) and then every cell of
    ``plan`` on one server start; also returns each model's KV pool in tokens, as its engine reported it."""
    cap = max_batch_of(cfg)
    runs: list[Measured] = []
    costs = None
    async with crossval_server(cfg) as frontend:
        drift = await probe(frontend) if probe is not None else None
        if drift is not None:
            ratios = ", ".join(f"{r:.2f}x" for r in drift.ratios)
            progress(f"drift probe: engines step at {ratios} their profiles ({drift.action})")
        if stack is not None:
            router = plan.routers[0]
            programs = program_factory(router, cfg.num_models)
            names = [m.name for m in cfg.models]
            costs = await probe_stack(frontend, programs, asdict(router), names, workload, cap, stack.command,
                                      probe_concurrencies(plan.concurrencies))  # fmt: skip
            progress(f"stack probe: {stack_line(costs.to_dict())}")
        cells = plan.cells()
        for k, (rep, router, load, b) in enumerate(cells):
            policies = [BatchingPolicy(threshold=t, max_wait_s=None, max_batch=cap) for t in b]
            tag = f"{router.name}-{load_tag(load)}-b{'_'.join(map(str, b))}-r{rep}"
            sent = cell_arrivals(load.rps, workload, plan.arrival_seed + rep) if isinstance(load, Rate) else load
            run = await run_cell(frontend, program_factory(router, cfg.num_models), policies, sent, workload, tag)
            runs.append((rep, router, load, b, run))
            progress(f"[{k + 1}/{len(cells)}] {tag}: {run.throughput_tok_s:.1f} tok/s ({run.num_finished} finished)")
        kv_capacity = dict(frontend.kv_capacity)
    return runs, drift, costs, kv_capacity


def run_crossval(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    calibration: Calibration,
    workload: ClientWorkload,
    sim_s: float = 120.0,
    progress: Progress = lambda _msg: None,
    drift_mode: str = "scale",
    drift_tolerance: float = DEFAULT_TOLERANCE,
    stack: StackProbe | StackCosts | None = None,
    drift_placement: str = "auto",
) -> tuple[dict[str, Any], dict[str, list[RequestTrace]]]:
    """Probe, measure, predict and summarize; returns the result document and the replayed traces per router.
    The simulator adds the serving stack's costs measured by a probe run (``stack``: :class:`StackProbe`), read
    from a file (:class:`StackCosts`), or none (None). The drift probe times the engines as ``drift_placement``
    says (``trserve.crossval.drift.PROBE_PLACEMENTS``; serving under the plan's first router)."""
    started = time.time()
    load_before = os.getloadavg()
    names = [m.name for m in cfg.models]
    first = plan.routers[0]
    serving = serving_probe(cfg, drift_placement, ProgramChoice.of(first.program, first.params))

    async def probe(frontend: Any) -> DriftReport:
        return await probe_drift(frontend, workload, calibration, names, max_batch_of(cfg), drift_mode, drift_tolerance,
                                 serving)  # fmt: skip

    drift_probe = None if drift_mode == "skip" else probe
    stack_probe = stack if isinstance(stack, StackProbe) else None
    runs, drift, probed, kv_capacity = eventloop.run(measure(cfg, plan, workload, drift_probe, progress, stack_probe))
    measured_s = time.time() - started
    costs = costs_for_sim(probed or stack, drift is not None and drift.action == "scaled")
    calibration = replace(calibration, stack=costs, kv=kv_for_sim(cfg, kv_capacity))
    factors = drift.factors if drift is not None else [1.0] * cfg.num_models
    inputs = input_runs(plan, runs)
    cells, routing, traces, stats = predict_cells(cfg, plan, calibration, factors, runs, inputs, sim_s, progress)
    summary = summarize(cells)
    for router, entry in summarize_fidelity(cells).items():
        summary[router] |= entry
        summary[router]["out_of_sample"] = plan.repeats >= 2
    contexts = {r: (routing[r]["typical_context"], routing[r]["typical_extend"]) for r in traces}
    diagnosis = add_rescaled_predictions(cells, stats, traces, calibration, contexts, max_batch_of(cfg), sim_s)
    doc = {
        "summary": summary,
        "inputs": inputs_note(plan),
        "drift": drift.to_dict() if drift is not None else {"action": "not probed"},
        "stack": costs.to_dict() if costs is not None else {"source": "none: the simulator's stack is ideal"},
        "memory": memory_note(calibration.kv, kv_capacity),
        "diagnosis": diagnosis,
        "cells": cells,
        "routing": routing,
        "workload": workload_note(workload),
        "plan": {**asdict(plan), "thresholds": {str(n): v for n, v in plan.thresholds.items()}},
        "profiles": list(calibration.paths),
        "config": cfg.model_dump(mode="json"),
        "machine": {"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
        "measure_wall_s": measured_s,
        "total_wall_s": time.time() - started,
        "sim_s": sim_s,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return doc, traces


def input_runs(plan: CrossvalPlan, runs: Sequence[Measured]) -> tuple[list[Measured], list[Measured]]:
    """``(inputs, scored)``: the first repeat and the others with two or more repeats, else all runs twice."""
    if plan.repeats < 2:
        return list(runs), list(runs)
    return [m for m in runs if m[0] == 0], [m for m in runs if m[0] > 0]


def inputs_note(plan: CrossvalPlan) -> str:
    if plan.repeats < 2:
        return "in sample: routing statistics, context and replayed traces come from the scored cells (1 repeat)"
    scored = "repeat 1" if plan.repeats == 2 else f"repeats 1-{plan.repeats - 1}"
    return (
        "out of sample: routing statistics, context and replayed traces come from repeat 0 of every cell; "
        f"predictions are scored against {scored}"
    )


def workload_note(workload: ClientWorkload) -> dict[str, Any]:
    lengths = workload.output_lengths or (workload.max_tokens,)
    return {
        "name": workload.name,
        "num_prompts": len(workload.prompts),
        "mean_prompt_tokens": statistics.fmean(map(len, workload.prompts)),
        "mean_output_tokens": workload.mean_output,
        "max_output_tokens": max(lengths),
    }


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
            sim_load = scored_replay(plan, load) if isinstance(load, Rate) else load  # the scored arrivals
            for b in vectors:
                sim = sim_result(replay, predictor, sim_load, b, cap, sim_s)
                cell = score_cell(cfg, plan, router.name, load, b, runs, scored, calibration, context, extend)
                cell |= {"model_tok_s": model_tok_s[b], "sim_tok_s": sim.throughput_tok_s}
                cell |= sim_load.to_dict() if isinstance(sim_load, Replay) else {}
                cell["memory"]["sim"] = (sim.extra or {}).get("kv")
                cell["fidelity"]["sim"] = sim_fidelity(sim, cfg.entry_model)
                cell["fidelity"]["sim_vs_real"] = compare(cell["fidelity"]["real"], cell["fidelity"]["sim"])
                cells.append(add_errors(cell))
            progress(f"predicted {router.name} {load if isinstance(load, Rate) else f'N={load}'}")
    return cells, routing, traces, stats_by_router


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


def write_outputs(doc: dict[str, Any], traces: dict[str, list[RequestTrace]], out_dir: Path, title: str) -> list[Path]:
    """``crossval.json``, ``crossval.md``, ``crossval.png``, ``traces-<router>.jsonl`` and, after a stack probe,
    ``stack.json`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "crossval.json", out_dir / "crossval.md", out_dir / "crossval.png"]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n")
    table = markdown_table(doc["cells"], doc["summary"], doc.get("diagnosis"), doc.get("inputs", ""))
    stack = f"Simulator's stack costs: {stack_line(doc['stack'])}.\n\n" if "stack" in doc else ""
    paths[1].write_text(f"# {title}\n\n{drift_line(doc.get('drift'))}{stack}" + table)
    if doc.get("stack", {}).get("source") == "probe":
        paths.append(out_dir / STACK_FILE)
        paths[-1].write_text(json.dumps(doc["stack"], indent=1) + "\n")
    plot_cells(doc["cells"], paths[2], title)
    for name, items in traces.items():
        path = out_dir / f"traces-{name}.jsonl"
        path.write_text("".join(json.dumps(trace_to_dict(t), separators=(",", ":")) + "\n" for t in items))
        paths.append(path)
    return paths
