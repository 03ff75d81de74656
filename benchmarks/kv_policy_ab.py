"""Two spill policies on the same KV grid cell, side by side in one run: emulated cells of the KV grid
(``benchmarks/kv_emulated.py``'s engines, pools, lengths and routing), each run under policy A and under B,
alternating, ``--repeats`` times. For a grid cell whose single run put two policies within noise of each other.

    python benchmarks/kv_policy_ab.py [--cells rare-long/N128/2x,rare-long/N128/4x] [--policies cost,lru]
        [--repeats 3] [--out docs/bench-emulated/memory/kv-policy-ab.json]

Per cell: each run's tok/s, finished and failed requests and memory events, the medians under A and B and their
ratio, and whether every answer under A matched the same request's answer under B.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trserve.bench.requests import Lengths
from trsim.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_admission_ab import alternating, grid_cell, medians_and_answers, write_ab
from kv_emulated import grid_parser, run_cell


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="rare-long/N128/2x,rare-long/N128/4x", help="routing/N<n>/<memory>")
    parser.add_argument("--policies", default="cost,lru", help="A,B: two of cost, lru, admission-limit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-policy-ab.json")
    args, rest = parser.parse_known_args(argv)
    grid = grid_parser().parse_args(rest)  # the grid's own flags: --lengths, --scale, --window-s, --profiles
    a, b = args.policies.split(",")
    lengths = Lengths(grid.lengths, grid.scale)
    roomy = int(load_profile(Path(grid.profiles) / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/kv_policy_ab.py", *(argv or sys.argv[1:])]),
        "inputs": "this run: the KV grid's emulated engines (profiles " + grid.profiles + "), pools and lengths",
        "policies": [a, b], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1min_before": os.getloadavg()[0],
        "cells": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.cells.split(","):
            runs = []
            for k in range(2 * args.repeats):
                policy = a if alternating(k) else b
                cell = grid_cell(f"{key}/{policy}", lengths, roomy)
                row = run_cell(cell, grid, lengths, Path(tmp))
                runs.append({"policy": policy, **{f: row[f] for f in (
                    "throughput_tok_s", "num_finished", "num_failed", "kv", "answers")}})  # fmt: skip
                print(json.dumps({"cell": key, "policy": policy, "tok_s": row["throughput_tok_s"]}), flush=True)
            summary = medians_and_answers(runs, "policy", a, b)
            doc["cells"].append({"key": key, "kv_tokens": cell.kv_tokens, "summary": summary, "runs": runs})
    write_ab(doc, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
