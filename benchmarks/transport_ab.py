"""Summary of the transport A/B (``benchmarks/transport_ab.sh``): per system and N, each run's measured rate over
the throughput model's and its server CPU per committed token, written to ``DIR/summary.json``.

    python benchmarks/transport_ab.py docs/bench-emulated/transport-ab
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(root: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{"system N=n": {run: {"of_model": ratio, "server_cpu_us_per_token": us}}}`` over ``root/*/bench.json``."""
    cells: dict[str, dict[str, dict[str, float]]] = {}
    for path in sorted(root.glob("*/bench.json")):
        for run in json.loads(path.read_text())["runs"]:
            if not run.get("predicted_model_tok_s"):
                continue
            cell = cells.setdefault(f"{run['system']} N={run['concurrency']}", {})
            cell[path.parent.name] = {
                "of_model": run["throughput_tok_s"] / run["predicted_model_tok_s"],
                "server_cpu_us_per_token": run["cpu"]["server_cpu_us_per_token"],
            }
    return cells


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench-emulated/transport-ab")
    cells = summary(root)
    doc = {"command": "python benchmarks/transport_ab.py " + str(root), "cells": cells}
    (root / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    for name, runs in cells.items():
        print(name, "  ".join(f"{r} {v['of_model']:.1%} {v['server_cpu_us_per_token']:.0f}us" for r, v in runs.items()))


if __name__ == "__main__":
    main()
