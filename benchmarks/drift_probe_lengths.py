"""Does the drift probe's request length explain why the CPU pair's crossval cells step faster than it says?

    python benchmarks/drift_probe_lengths.py [--profiles calibration/crossval/cpu-2core] [--rounds 4]
        [--out calibration/crossval/cpu-2core/probe-lengths/probe-lengths.json] [--analyse-only]

One engine start of the default config (the local CPU pair, real vLLM engines), the crossval ``fixed`` workload
and its ``markov`` router. Each round runs, in this order: the serving drift probe as crossval runs it (32-token
requests at N = 1, 2, 4), the same probe with the cells' 64-token requests (the two probes alternate which goes
first), and three crossval cells (64 tokens, B = (1, 1), N = 1, 4, 8; 2 s warm-up, 7 s window). Every part's pure
decode and hand-off steps are compared with the profiles at its own context
(``trserve.crossval.drift.step_ratios``): per model the median ratio and the median per batch size. A probe that
predicts the cells would find their ratios; the JSON holds every part's, each round's, so the spread between
rounds is beside the difference between the probes. ``analysis`` scores each probe against the same round's cells,
per (cell, model, batch size): its one factor per model as ``drift: scale`` applies it, or its factor at that batch
size (interpolated between the batch sizes it saw, the nearest beyond them); ``--analyse-only`` re-derives it from
``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from tokenrouter.commands.serve import _load
from trcore import BatchingPolicy
from trserve.crossval.drift import PROBE_MAX_TOKENS, probe_config, probe_context, probe_steps, step_ratios
from trserve.crossval.harness import crossval_server, run_cell
from trserve.crossval.messages import ProgramChoice
from trserve.crossval.plan import default_routers
from trserve.crossval.predict import Calibration, load_calibration
from trserve.crossval.workloads import make_workload
from trsim.latency import TableModel

CELL_TOKENS = 64
CELL_CONCURRENCIES = (1, 4, 8)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="calibration/crossval/cpu-2core")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default="calibration/crossval/cpu-2core/probe-lengths/probe-lengths.json")
    parser.add_argument("--analyse-only", action="store_true", help="re-derive the analysis of --out")
    return parser.parse_args()


def at_batch(per_batch: dict[str, float], batch: int) -> float:
    """A per-batch factor at ``batch``: interpolated between the batch sizes measured, the nearest beyond them
    (:class:`~trsim.latency.TableModel`'s rule)."""
    return TableModel([int(b) for b in per_batch], list(per_batch.values())).predict(batch, 0, 0)


def analyse(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per part the median ratio over the rounds and its range, the per-batch medians pooled over the rounds, and
    per probe the median |cell ratio / probe factor - 1| over every (round, cell, model, batch size), with one
    factor per model and with the factor at the batch size."""
    parts = list(rounds[0])
    out: dict[str, Any] = {"ratios": {}, "per_batch": {}, "probe_error": {}}
    for part in parts:
        ratios = [[r[part]["ratios"][m] for r in rounds] for m in range(2)]
        out["ratios"][part] = [{"median": statistics.median(x), "min": min(x), "max": max(x)} for x in ratios]
        pooled: list[dict[str, list[float]]] = [{}, {}]
        for r in rounds:
            for m in range(2):
                for b, v in r[part]["per_batch"][m].items():
                    pooled[m].setdefault(b, []).append(v)
        out["per_batch"][part] = [{b: statistics.median(v) for b, v in sorted(p.items(), key=lambda kv: int(kv[0]))}
                                  for p in pooled]  # fmt: skip
    for probe in (p for p in parts if p.startswith("probe")):
        one, per = [], []
        for r in rounds:
            for cell in (p for p in parts if p.startswith("cell")):
                for m in range(2):
                    for b, v in r[cell]["per_batch"][m].items():
                        one.append(abs(v / r[probe]["ratios"][m] - 1))
                        per.append(abs(v / at_batch(r[probe]["per_batch"][m], int(b)) - 1))
        out["probe_error"][probe] = {"one_factor_median": statistics.median(one),
                                     "per_batch_median": statistics.median(per), "points": len(one)}  # fmt: skip
    return out


def ratios_doc(steps: list[Any], calibration: Calibration, context: int) -> dict[str, Any]:
    measured = step_ratios(steps, calibration, context, 2, appends=True)
    return {"context": context, "ratios": measured.ratios, "num_steps": measured.num_steps,
            "per_batch": [{str(b): r for b, r in d.items()} for d in measured.per_batch]}  # fmt: skip


async def one_round(
    frontend: Any, calibration: Calibration, cfg: Any, program: ProgramChoice, k: int
) -> dict[str, Any]:
    workload = make_workload("fixed", cfg, CELL_TOKENS, 2.0, 7.0)
    cap = min(m.max_num_seqs for m in cfg.models)
    out: dict[str, Any] = {}
    lengths = (PROBE_MAX_TOKENS, CELL_TOKENS) if k % 2 == 0 else (CELL_TOKENS, PROBE_MAX_TOKENS)
    for tokens in lengths:
        steps = await probe_steps(frontend, workload, 2, cap, program, max_tokens=tokens, label=f"r{k}-t{tokens}")
        out[f"probe_{tokens}"] = ratios_doc(steps, calibration, probe_context(workload, tokens))
    policies = [BatchingPolicy(threshold=1, max_wait_s=None, max_batch=cap)] * 2
    for n in CELL_CONCURRENCIES:
        run = await run_cell(frontend, lambda m: program, policies, n, workload, f"r{k}-cell-n{n}")
        out[f"cell_n{n}"] = {**ratios_doc(run.steps, calibration, probe_context(workload, CELL_TOKENS)),
                             "tok_s": run.throughput_tok_s}  # fmt: skip
    return out


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cfg = probe_config(_load(None, None, None))
    calibration = load_calibration(args.profiles, [m.name for m in cfg.models])
    markov = default_routers()[0]
    program = ProgramChoice.of(markov.program, markov.params)
    rounds = []
    async with crossval_server(cfg) as frontend:
        for k in range(args.rounds):
            rounds.append(await one_round(frontend, calibration, cfg, program, k))
            summary = {part: [round(r, 3) for r in d["ratios"]] for part, d in rounds[-1].items()}
            print(f"round {k + 1}: {json.dumps(summary)}", flush=True)
    return rounds


def main() -> None:
    args = parse_args()
    if args.analyse_only:
        doc = json.loads(Path(args.out).read_text())
        doc["analysis"] = analyse(doc["rounds"])
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc["analysis"]["probe_error"]))
        return
    started, load_before = time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getloadavg()
    rounds = asyncio.run(run(args))
    command = f"python benchmarks/drift_probe_lengths.py --profiles {args.profiles} --rounds {args.rounds}"
    doc = {"command": command, "profiles": args.profiles, "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": load_before,
           "load_after": os.getloadavg(), "analysis": analyse(rounds), "rounds": rounds}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["analysis"]["probe_error"]))


if __name__ == "__main__":
    main()
