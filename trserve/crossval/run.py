"""One cross-validation run: measure every cell on the real server, then predict each cell with the throughput
model and the simulator, and write JSON, markdown and a figure."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trcore import PROGRAMS, BatchingPolicy, RoutingProgram
from trcore.traces import RequestTrace, trace_to_dict
from trserve.config import ServeConfig
from trserve.crossval.diagnose import add_rescaled_predictions
from trserve.crossval.harness import CellRun, ClientWorkload, StepRecord, crossval_server, run_cell
from trserve.crossval.plan import CrossvalPlan, RouterChoice
from trserve.crossval.predict import (
    Calibration,
    model_predictions,
    routing_stats,
    sim_prediction,
    typical_context,
    typical_extend,
)
from trserve.crossval.report import add_errors, markdown_table, plot_cells, summarize
from trserve.engine.tokenizer import Tokenizer
from trserve.paths import PROMPTS_DIR
from trserve.runtime.runspec import resolve_model_path

PROMPTS_FILE = PROMPTS_DIR / "routing.jsonl"
Progress = Callable[[str], None]


def load_prompts(cfg: ServeConfig, path: Path = PROMPTS_FILE) -> tuple[tuple[int, ...], ...]:
    """The workload's prompts as chat-formatted token ids of the entry model's tokenizer."""

    tokenizer = Tokenizer(resolve_model_path(cfg.models[cfg.entry_model].path))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return tuple(tuple(tokenizer.encode_chat([{"role": "user", "content": r["prompt"]}])) for r in rows)


def max_batch_of(cfg: ServeConfig) -> int:
    return min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))


def program_factory(router: RouterChoice, num_models: int) -> Callable[[int], RoutingProgram]:

    return lambda m: PROGRAMS.create(router.program, m, num_models, **router.params)


async def measure(
    cfg: ServeConfig, plan: CrossvalPlan, workload: ClientWorkload, progress: Progress
) -> list[tuple[RouterChoice, int, tuple[int, ...], CellRun]]:
    """Run every cell of ``plan`` on one server start."""
    cap = max_batch_of(cfg)
    runs = []
    async with crossval_server(cfg) as frontend:
        cells = plan.cells()
        for k, (rep, router, n, b) in enumerate(cells):
            policies = [BatchingPolicy(threshold=t, max_wait_s=None, max_batch=cap) for t in b]
            tag = f"{router.name}-n{n}-b{'_'.join(map(str, b))}-r{rep}"
            run = await run_cell(frontend, program_factory(router, cfg.num_models), policies, n, workload, tag)
            runs.append((router, n, b, run))
            progress(f"[{k + 1}/{len(cells)}] {tag}: {run.throughput_tok_s:.1f} tok/s ({run.num_finished} finished)")
    return runs


def step_breakdown(steps: Sequence[StepRecord], num_models: int, measure_s: float) -> list[dict[str, float]]:
    """Per model: steps, mean batch, mean engine step time and busy fraction in the window."""
    out = []
    for m in range(num_models):
        mine = [s for s in steps if s.model == m]
        out.append(
            {
                "num_steps": len(mine),
                "mean_batch": statistics.fmean(s.batch_size for s in mine) if mine else 0.0,
                "mean_step_s": statistics.fmean(s.step_s for s in mine) if mine else 0.0,
                "busy_fraction": sum(s.step_s for s in mine) / measure_s if measure_s else 0.0,
            }
        )
    return out


def run_crossval(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    calibration: Calibration,
    sim_s: float = 120.0,
    progress: Progress = lambda _msg: None,
    prompts: tuple[tuple[int, ...], ...] | None = None,
) -> tuple[dict[str, Any], dict[str, list[RequestTrace]]]:
    """Measure, predict and summarize; returns the result document and the finished traces per router."""
    started = time.time()
    load_before = os.getloadavg()
    workload = ClientWorkload(prompts or load_prompts(cfg), plan.max_tokens, plan.warmup_s, plan.measure_s)
    runs = asyncio.run(measure(cfg, plan, workload, progress))
    measured_s = time.time() - started
    traces = {r.name: replay_traces([run for (rr, _, _, run) in runs if rr.name == r.name]) for r in plan.routers}
    cells, routing = predict_cells(cfg, plan, calibration, runs, traces, sim_s, progress)
    summary = summarize(cells)
    stats = {r: routing_stats(t, cfg.num_models, cfg.entry_model) for r, t in traces.items()}
    contexts = {r: (routing[r]["typical_context"], routing[r]["typical_extend"]) for r in traces}
    diagnosis = add_rescaled_predictions(cells, stats, traces, calibration, contexts, max_batch_of(cfg), sim_s)
    doc = {
        "summary": summary,
        "diagnosis": diagnosis,
        "cells": cells,
        "routing": routing,
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


def replay_traces(runs: Sequence[CellRun]) -> list[RequestTrace]:
    """The traces the predictors use: finished requests of every cell (all recorded ones, cut off at the end of
    their cell, only when none finished, as in very short runs)."""
    finished = [t for run in runs for t in run.finished]
    return finished or [t for run in runs for t in run.traces]


def predict_cells(
    cfg: ServeConfig,
    plan: CrossvalPlan,
    calibration: Calibration,
    runs: Sequence[tuple[RouterChoice, int, tuple[int, ...], CellRun]],
    traces: dict[str, list[RequestTrace]],
    sim_s: float,
    progress: Progress,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Average repeats per cell, then add both predictors' throughput and errors."""
    cap = max_batch_of(cfg)
    cells: list[dict[str, Any]] = []
    routing: dict[str, Any] = {}
    for router in plan.routers:
        stats = routing_stats(traces[router.name], cfg.num_models, cfg.entry_model)
        context = typical_context(traces[router.name], plan.max_tokens)
        extend = typical_extend(traces[router.name], cfg.num_models)
        routing[router.name] = {**stats.to_dict(), "typical_context": context, "typical_extend": extend}
        for n in plan.concurrencies:
            vectors = plan.thresholds[n]
            model_tok_s = model_predictions(stats, calibration, n, vectors, context, cap, extend)
            for b in vectors:
                mine = [run for (r, nn, bb, run) in runs if r.name == router.name and nn == n and bb == b]
                values = [run.throughput_tok_s for run in mine]
                sim = sim_prediction(traces[router.name], calibration, n, b, cap, sim_s)
                steps = [s for run in mine for s in run.steps]
                cell = {
                    "router": router.name,
                    "concurrency": n,
                    "thresholds": list(b),
                    "measured_tok_s": statistics.fmean(values),
                    "measured_runs": values,
                    "measured_spread": statistics.stdev(values) if len(values) > 1 else 0.0,
                    "model_tok_s": model_tok_s[b],
                    "sim_tok_s": sim,
                    "steps": step_breakdown(steps, cfg.num_models, plan.measure_s * len(mine)),
                    "profile_step_s_at_mean_batch": [
                        calibration.table(m, max(1, round(s["mean_batch"])), context, extend[m])[-1]
                        for m, s in enumerate(step_breakdown(steps, cfg.num_models, 1.0))
                    ],
                }
                cells.append(add_errors(cell))
            progress(f"predicted {router.name} N={n}")
    return cells, routing


def write_outputs(doc: dict[str, Any], traces: dict[str, list[RequestTrace]], out_dir: Path, title: str) -> list[Path]:
    """``crossval.json``, ``crossval.md``, ``crossval.png`` and ``traces-<router>.jsonl`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "crossval.json", out_dir / "crossval.md", out_dir / "crossval.png"]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n")
    paths[1].write_text(f"# {title}\n\n" + markdown_table(doc["cells"], doc["summary"], doc.get("diagnosis")))
    plot_cells(doc["cells"], paths[2], title)
    for name, items in traces.items():
        path = out_dir / f"traces-{name}.jsonl"
        path.write_text("".join(json.dumps(trace_to_dict(t), separators=(",", ":")) + "\n" for t in items))
        paths.append(path)
    return paths
