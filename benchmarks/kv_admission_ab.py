"""``server.kv_admission`` on and off, side by side in one run: emulated cells of the KV grid
(``benchmarks/kv_emulated.py``'s engines, pools, lengths and routing), each run with the front end holding requests
behind a KV waiter and without, alternating, ``--repeats`` times.

    python benchmarks/kv_admission_ab.py [--cells r2r/N64/2x/cost,rare-long/N64/2x/cost] [--repeats 2]
        [--out docs/bench-emulated/memory/kv-admission-ab.json]

Per cell: each run's tok/s, finished and failed requests and memory events (admission waits, spills,
preemptions, recomputed tokens), the medians on and off and their ratio, and whether every answer on matched the
same request's answer off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trserve.bench.kv_grid import GridCell, pool_tokens
from trserve.bench.requests import Lengths
from trsim.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_emulated import grid_parser, run_cell


def grid_cell(key: str, lengths: Lengths, roomy: int) -> GridCell:
    """The grid's cell of ``routing/N<n>/<memory>/<system>``."""
    routing, n, memory, system = key.split("/")
    concurrency = int(n.removeprefix("N"))
    return GridCell(routing, concurrency, memory, system, pool_tokens(memory, concurrency, lengths, roomy))


def medians_and_answers(runs: list[dict[str, Any]], field: str, a: Any, b: Any) -> dict[str, Any]:
    """Median tok/s of the runs whose ``field`` is ``a`` and ``b``, a / b, the failures, and how many answers the
    two sides both finished and how many of those are identical (the runs' ``answers`` are taken out)."""
    med = {v: statistics.median(r["throughput_tok_s"] for r in runs if r[field] == v) for v in (a, b)}
    answers: dict[Any, dict[str, str]] = {a: {}, b: {}}
    for r in runs:
        answers[r[field]].update(r.pop("answers"))
    common = set(answers[a]) & set(answers[b])
    return {
        "a_tok_s": med[a], "b_tok_s": med[b], "a_over_b": med[a] / med[b] if med[b] else None,
        "failed": sum(r["num_failed"] for r in runs), "answers_compared": len(common),
        "answers_identical": sum(answers[a][k] == answers[b][k] for k in common),
    }  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median tok/s on and off, their ratio, and whether the answers on and off agree."""
    found = medians_and_answers(runs, "kv_admission", True, False)
    renamed = {"a_tok_s": "on_tok_s", "b_tok_s": "off_tok_s", "a_over_b": "on_over_off"}
    return {renamed.get(k, k): v for k, v in found.items()}


def write_ab(doc: dict[str, Any], out: Path) -> None:
    """Stamp the run's end on ``doc``, write it to ``out`` and print each cell's summary."""
    doc["finished"], doc["load_1min_after"] = time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["cells"]:
        print(c["key"], json.dumps(c["summary"]))


def alternating(k: int) -> bool:
    """Whether run ``k`` of an A/B pair sequence is A: A, B, B, A, A, B, ...: neither always first."""
    return k % 2 == (k // 2) % 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="r2r/N64/2x/cost,rare-long/N64/2x/cost")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-admission-ab.json")
    args, rest = parser.parse_known_args(argv)
    grid = grid_parser().parse_args(rest)  # the grid's own flags: --scale, --warmup-s, --window-s, --profiles
    lengths = Lengths(grid.lengths, grid.scale)
    roomy = int(load_profile(Path(grid.profiles) / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/kv_admission_ab.py", *(argv or sys.argv[1:])]),
        "inputs": "this run: the KV grid's emulated engines (profiles " + grid.profiles + "), pools and lengths",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1min_before": os.getloadavg()[0], "cells": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.cells.split(","):
            cell = grid_cell(key, lengths, roomy)
            runs = []
            for k in range(2 * args.repeats):
                on = alternating(k)
                row = run_cell(cell, grid, lengths, Path(tmp), {"kv_admission": on})
                runs.append({"kv_admission": on, **{f: row[f] for f in (
                    "throughput_tok_s", "num_finished", "num_failed", "kv", "answers")}})  # fmt: skip
                print(json.dumps({"cell": key, "kv_admission": on, "tok_s": row["throughput_tok_s"]}), flush=True)
            doc["cells"].append({"key": key, "kv_tokens": cell.kv_tokens, "summary": summarize(runs), "runs": runs})
    write_ab(doc, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
