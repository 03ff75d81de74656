"""The emulated KV grid's cells predicted again, by the simulator with the serving stack's costs.

    python benchmarks/kv_emulated_stack.py [--grid docs/bench-emulated/memory/kv-emulated.json]
        [--stack calibration/crossval/emulated-r2r-a100/stack.json]
        [--out docs/bench-emulated/memory/kv-emulated-stack.json]

Every committed cell of ``benchmarks/kv_emulated.py`` (its measured throughput is read, nothing is measured) is
simulated twice from the same twin (``trserve/bench/kv_grid.py`` ``sim_config``, the same tokens and warm-up as the
grid's own prediction): as committed (an ideal stack) and with a crossval stack probe's costs (``--stack``: host time
per step and per request, hand-off transit, the client's turnaround between a session's requests, delivery). The
probe is another run of the same stack on the same emulated engines (fixed 64-token requests at N = 2 and 16, a
different hour), so the costs are out of sample for every cell; the grid's own windows fit nothing. Writes the
measured, both simulated figures and their ratios per cell, and how many cells each is within 5% of.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trserve.bench.kv_grid import GridCell, sim_config
from trserve.bench.requests import Lengths
from trserve.crossval.stack import StackCosts, load_stack
from trsim.driver import simulate
from trsim.plan_inputs import last_model_stack, with_stack

TOLERANCE = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="docs/bench-emulated/memory/kv-emulated.json")
    parser.add_argument("--stack", default="calibration/crossval/emulated-r2r-a100/stack.json")
    parser.add_argument("--profiles", default="docs/bench-emulated/memory/profiles")
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-emulated-stack.json")
    args = parser.parse_args(argv)
    for name in ("grid", "stack"):
        if not Path(getattr(args, name)).is_file():
            parser.error(f"--{name}: {getattr(args, name)} is not a file")
    return args


def predict(row: dict[str, Any], stack: StackCosts | None, profiles: dict[str, Path], lengths: Lengths) -> float:
    """The simulator's throughput of one grid cell, with ``stack``'s costs or an ideal stack (None)."""
    cell = GridCell(row["routing"], row["concurrency"], row["memory"], row["system"], row["kv_tokens"])
    config = sim_config(cell, profiles, lengths)
    if stack is not None:
        fields = stack.sim_fields()
        config = with_stack(config, last_model_stack(fields) if cell.system == "llm-only" else fields)
        config = replace(config, workload=replace(config.workload, think_time_s=stack.client_turnaround_s))
    lifetime = int(cell.concurrency * lengths.mean_lengths()[1])
    return simulate(config, tokens=max(20000, 4 * lifetime), warmup_tokens=lifetime).throughput_tok_s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = json.loads(Path(args.grid).read_text())
    spec = grid["runs"][0]["lengths"]
    lengths = Lengths(spec["preset"], spec["scale"], spec["seed"])
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in ("small", "large")}
    stack = load_stack(Path(args.stack), 2)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    cells = []
    for row in grid["cells"]:
        ideal, costed = predict(row, None, profiles, lengths), predict(row, stack, profiles, lengths)
        measured = row["throughput_tok_s"]
        cells.append({"key": row["key"], "measured_tok_s": measured, "sim_tok_s": ideal, "sim_stack_tok_s": costed,
                      "measured_over_sim": measured / ideal, "measured_over_sim_stack": measured / costed})  # fmt: skip
        print(json.dumps(cells[-1]), flush=True)
    doc = {"command": " ".join(["python", "benchmarks/kv_emulated_stack.py", *(argv or sys.argv[1:])]),
           "started": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "grid": args.grid,
           "stack": {"path": args.stack, **stack.to_dict()}, "summary": summary(cells), "cells": cells}  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"]))
    return 0


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per simulator: cells within :data:`TOLERANCE`, and the median and range of measured / simulated."""
    out = {}
    for name in ("measured_over_sim", "measured_over_sim_stack"):
        ratios = [c[name] for c in cells]
        out[name] = {"within_5pct": sum(abs(r - 1) <= TOLERANCE for r in ratios), "cells": len(ratios),
                     "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
