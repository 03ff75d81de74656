"""One cross-validation run: measure every cell on the real server, probe the engines' drift from their profiles
(after the input repeat), then predict each cell with the throughput model and the simulator, and write JSON,
markdown and a figure.

Out of sample: with two or more repeats, the first repeat of every cell is the input run (routing statistics,
typical context and appended tokens, and the traces the simulator replays come from it) and the predictions
are scored against the other repeats only. With one repeat the inputs come from the scored cells themselves,
and the summary says so (``out_of_sample: false``)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from trcore import BatchingPolicy
from trcore.traces import RequestTrace, trace_to_dict
from trserve import eventloop
from trserve.config import ServeConfig
from trserve.crossval.diagnose import add_rescaled_predictions
from trserve.crossval.drift import probe_drift, serving_probe
from trserve.crossval.fidelity import (
    summarize_fidelity,
)
from trserve.crossval.harness import ClientWorkload, crossval_server, run_cell
from trserve.crossval.messages import ProgramChoice
from trserve.crossval.open_client import cell_arrivals
from trserve.crossval.plan import CrossvalPlan, Rate, RouterChoice, load_tag
from trserve.crossval.predict import (
    Calibration,
    kv_for_sim,
    memory_note,
)
from trserve.crossval.report import drift_line, markdown_table, plot_cells, summarize
from trserve.crossval.scoring import Measured, Progress, input_runs, max_batch_of, predict_cells
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
    """Run the stack probe (if ``stack``), every cell of ``plan`` and the drift probe (``probe(frontend)``, if
    any) on one server start; also returns each model's KV pool in tokens, as its engine reported it.

    With two or more repeats the drift probe runs after the input repeat (repeat 0), before the scored ones: the
    closest to the scored cells it can be while its windows stay its own (out of sample). The machine's speed
    moves over a run (on the CPU pair the input repeat ran 2-8% slower than the scored ones at the median cell).
    With one repeat it runs first."""
    cap = max_batch_of(cfg)
    runs: list[Measured] = []
    costs, drift = None, None
    async with crossval_server(cfg) as frontend:

        async def probe_once() -> DriftReport | None:
            if probe is None:
                return None
            report = await probe(frontend)
            ratios = ", ".join(f"{r:.2f}x" for r in report.ratios)
            progress(f"drift probe: engines step at {ratios} their profiles ({report.action})")
            return report

        if plan.repeats < 2:
            drift = await probe_once()
        if stack is not None:
            router = plan.routers[0]
            programs = program_factory(router, cfg.num_models)
            names = [m.name for m in cfg.models]
            costs = await probe_stack(frontend, programs, asdict(router), names, workload, cap, stack.command,
                                      probe_concurrencies(plan.concurrencies))  # fmt: skip
            progress(f"stack probe: {stack_line(costs.to_dict())}")
        cells = plan.cells()
        for k, (rep, router, load, b) in enumerate(cells):
            if rep == 1 and drift is None:
                drift = await probe_once()
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
    summary = summarize_cells(cells, plan.repeats >= 2)
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


def summarize_cells(cells: list[dict[str, Any]], out_of_sample: bool) -> dict[str, Any]:
    """Per router: the predictors' errors, the latency fidelity's, and whether the cells were out of sample."""
    summary = summarize(cells)
    for router, entry in summarize_fidelity(cells).items():
        summary[router] |= entry
        summary[router]["out_of_sample"] = out_of_sample
    return summary


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
