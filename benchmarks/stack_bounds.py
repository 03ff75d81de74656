"""Where the routed systems' gap to the throughput model goes, cost by cost: the simulator on a bench run's routing
statistics, latencies and thresholds, with a crossval probe's measured stack costs (all of them; the host gap and
step overrun alone, as with a transport that took no time; the hand-off transit alone, as with a loop that took no
time between steps), beside the model and the measured rate.

    python benchmarks/stack_bounds.py [--bench docs/bench-emulated/bench.json]
        [--stack calibration/crossval/emulated-r2r-a100/stack.json] [--out docs/bench-emulated/stack-bounds.json]

The costs come from the probe's own run, not from the bench's cells, so those columns are predictions; the
"measured" column is the bench's, and ``sim_cell_host_gaps`` (the probe's costs with each cell's own measured mean
host gaps) is a diagnosis in sample: how much of the measured rate the cell's host gaps account for. Those run on
endless requests, as the throughput model's chain; ``sim_closed_loop_all_costs`` puts all the probe's costs in
the bench's closed loop instead (requests of the bench's ``max_tokens``, the probe's client turnaround before a
session's next request). Simulator runs are as the bench's (20,000 tokens after a 10% warm-up).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trserve.bench.outputs import config_path
from trserve.bench.predict import emulated_tables, sim_prediction
from trserve.config import load_config
from trserve.crossval.stack import StackCosts, load_stack

SYSTEMS = {"tokenrouter": "tokenrouter", "tokenrouter-b1": "b1"}
SIM_TOKENS = 20000


def variants(stack: StackCosts) -> dict[str, StackCosts | None]:
    """The stack costs as measured, and each kind alone."""
    zeros = (0.0,) * len(stack.host_gap_s)
    return {
        "sim_ideal_tok_s": None,
        "sim_all_costs_tok_s": stack,
        "sim_host_gap_only_tok_s": replace(stack, handoff_transit_s=zeros),
        "sim_transit_only_tok_s": replace(stack, host_gap_s=zeros, step_overrun_s=()),
    }


def with_cell_gaps(stack: StackCosts, run: dict[str, Any], names: list[str]) -> StackCosts:
    """The probe's costs with the host gaps this cell measured instead (its own mean per model, 0 for a model
    that never stepped back to back): a diagnosis in sample, not a prediction."""
    steps = run["cpu"]["emulated_step_ms"]
    gaps = tuple(1e-3 * (steps[m].get("mean_host_gap_ms") or 0.0) for m in names)
    return replace(stack, host_gap_s=gaps)


def cell(
    run: dict[str, Any],
    routing: dict[str, Any],
    tables: list[list[float]],
    stack: StackCosts,
    names: list[str],
    output_tokens: int,
) -> dict:
    """One routed cell: the model, the measured rate, and the simulator under each variant of the costs (on
    endless requests), and with all of them in the bench's closed loop (``output_tokens`` per request, the
    probe's client turnaround between a session's requests)."""
    n, system = run["concurrency"], run["system"]
    thresholds = run["thresholds"] or [1] * len(tables)
    row: dict[str, Any] = {
        "system": system,
        "concurrency": n,
        "thresholds": thresholds,
        "measured_tok_s": run["throughput_tok_s"],
        "model_tok_s": run["predicted_model_tok_s"],
    }
    common = (routing["P"], routing["C"], tables, n, thresholds, SYSTEMS[system], SIM_TOKENS)
    for name, costs in {**variants(stack), "sim_cell_host_gaps_tok_s": with_cell_gaps(stack, run, names)}.items():
        row[name] = sim_prediction(*common, costs)
    row["sim_closed_loop_all_costs_tok_s"] = sim_prediction(*common, stack, output_tokens)
    row["over_model"] = {k: row[k] / row["model_tok_s"] for k in row if k.endswith("_tok_s") and k != "model_tok_s"}
    return row


def config_of(bench: dict[str, Any]) -> dict[str, Any]:
    """The serve config a bench ran (its ``--config`` argument, read again)."""
    return load_config(config_path(bench)).model_dump(mode="json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path("docs/bench-emulated/bench.json"))
    parser.add_argument("--stack", type=Path, default=Path("calibration/crossval/emulated-r2r-a100/stack.json"))
    parser.add_argument("--out", type=Path, default=Path("docs/bench-emulated/stack-bounds.json"))
    args = parser.parse_args()
    bench = json.loads(args.bench.read_text())
    config = config_of(bench)
    names = [m["name"] for m in config["models"]]
    stack = load_stack(args.stack, len(names))
    routing = bench["routing"]["markov"]
    top = max(r["concurrency"] for r in bench["runs"])
    tables = emulated_tables(config, names, top)
    if tables is None:
        raise SystemExit(f"{args.bench}: not a bench on emulated engines")
    output_tokens = int(bench["settings"]["max_tokens"])
    rows = [cell(r, routing, tables, stack, names, output_tokens) for r in bench["runs"] if r["system"] in SYSTEMS]
    command = " ".join(["python benchmarks/stack_bounds.py", *sys.argv[1:]])
    doc = {"command": command, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "bench": str(args.bench), "bench_created": bench["created"], "stack": str(args.stack),
           "stack_costs": stack.to_dict(), "cells": rows}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        ratios = " ".join(f"{k.replace('_tok_s', '')} {v:.3f}" for k, v in r["over_model"].items())
        print(f"{r['system']:15s} N={r['concurrency']:3d} {ratios}")


if __name__ == "__main__":
    main()
