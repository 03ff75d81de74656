"""Spill policies in the simulator over many seeds: for cells of the KV grid (``benchmarks/kv_emulated.py``'s
latency profiles, pools, routing and lengths), each policy's simulated throughput per seed and the ratio of the
first policy to the second, seed by seed, with its mean and standard deviation. Tells a systematic gap between
two policies from one seed's luck; computation only (no server), so it needs no measurement lock.

    python benchmarks/kv_sim_seeds.py [--cells short-reasoning/rare-long/N32/4x,...] [--policies cost,lru]
        [--seeds 8] [--out docs/bench-sim/memory/kv-sim-seeds.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from trserve.bench.kv_grid import GridCell, pool_tokens, sim_config
from trserve.bench.requests import Lengths
from trsim.driver import simulate
from trsim.profile import load_profile

#: The grid's lengths: short-reasoning x 1/8 and long-reasoning x 1/32 (docs/benchmarks.md).
SCALES = {"short-reasoning": 0.125, "long-reasoning": 0.03125}
CELLS = "long-reasoning/rare-long/N32/2x,short-reasoning/rare-long/N32/4x,short-reasoning/rare-long/N128/4x"


def simulated_tok_s(key: str, policy: str, seed: int, profiles: Path, roomy: int) -> float:
    """The simulator's throughput for cell ``key`` (``lengths/routing/N<n>/<memory>``) under ``policy``."""
    preset, routing, n, memory = key.split("/")
    lengths = Lengths(preset, SCALES[preset])
    concurrency = int(n.removeprefix("N"))
    cell = GridCell(routing, concurrency, memory, policy, pool_tokens(memory, concurrency, lengths, roomy))
    paths = {m: profiles / f"{m}.json" for m in ("small", "large")}
    lifetime = int(concurrency * lengths.mean_lengths()[1])
    config = sim_config(cell, paths, lengths, seed=seed)
    return simulate(config, tokens=max(20000, 4 * lifetime), warmup_tokens=lifetime).throughput_tok_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=CELLS)
    parser.add_argument("--policies", default="cost,lru")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--profiles", type=Path, default=Path("docs/bench-emulated/memory/profiles"))
    parser.add_argument("--out", type=Path, default=Path("docs/bench-sim/memory/kv-sim-seeds.json"))
    args = parser.parse_args(argv)
    a, b = args.policies.split(",")
    roomy = int(load_profile(args.profiles / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/kv_sim_seeds.py", *(argv or sys.argv[1:])]),
        "inputs": f"the simulator only: profiles {args.profiles}, the KV grid's pools and lengths",
        "policies": [a, b], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cells": [],
    }  # fmt: skip
    for key in args.cells.split(","):
        seeds = range(1, args.seeds + 1)
        tok_s = {p: [simulated_tok_s(key, p, s, args.profiles, roomy) for s in seeds] for p in (a, b)}
        ratios = [x / y for x, y in zip(tok_s[a], tok_s[b], strict=True)]
        row = {"key": key, "tok_s": tok_s, "ratio": ratios, "ratio_mean": statistics.mean(ratios),
               "ratio_sd": statistics.stdev(ratios) if len(ratios) > 1 else None}  # fmt: skip
        doc["cells"].append(row)
        print(key, f"{a}/{b} mean {row['ratio_mean']:.3f} sd {row['ratio_sd']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
