"""KV memory on emulated engines at the R2R pair's A100 step times: roomy vs 2x and 4x oversubscribed pools, the
three spill policies and ``llm-only`` side by side in one run, each cell beside the simulator with the same memory.

    python benchmarks/kv_emulated.py [-n 32,64,128] [--routings r2r,rare-long] [--lengths short-reasoning]
        [--scale 0.125] [--window-s 15] [--out docs/bench-emulated/memory/kv-emulated.json]

The cells and their pools: ``trserve/bench/kv_grid.py``. Step latency: the profiles of
``benchmarks/roofline_profile.py`` (context- and extend-dependent; ``--profiles``). Load: closed loop, the
``--lengths`` preset's lengths times ``--scale`` (``trserve/bench/requests.py``), each request routed by its own
Markov-walked schedule, so its text is the same in every cell and is compared with the roomy run's. The table and
plot are written beside ``--out`` under its name. Each cell runs on its own server (started,
measured once after the warm-up, stopped); after all measurements the simulator runs each cell's twin (``--no-sim``
and ``--sim-only`` split the two, so the simulator can run outside the measurement lock). Results are merged into
``--out`` cell by cell (a later run replaces the cells it ran), and the table and plot are rewritten from it
(``benchmarks/kv_emulated_report.py``).
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

import yaml

from trserve import eventloop
from trserve.bench.client import Workload, run_load
from trserve.bench.kv_grid import MEMORY, ROUTINGS, SYSTEMS, GridCell, cells_for, serve_config, sim_config
from trserve.bench.memory import cell_memory, window_memory
from trserve.bench.requests import Lengths
from trserve.server.process import ServerProcess
from trsim.driver import simulate
from trsim.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_emulated_report import write_report


def run_cell(
    cell: GridCell, args: argparse.Namespace, lengths: Lengths, tmp: Path, server: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One cell on its own server: the window's throughput, memory counters, failures and answer digests
    (``server``: settings of the config's ``server`` section beside the grid's)."""
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in ("small", "large")}
    path = tmp / f"{cell.key.replace('/', '-')}.yaml"
    config = serve_config(cell, profiles, max(64, cell.concurrency))
    config["server"].update(server or {})
    path.write_text(yaml.safe_dump(config))
    work = Workload(warmup_s=args.warmup_s, window_s=args.window_s, lengths=lengths, routing=cell.client_routing,
                    record_text=True)  # fmt: skip
    process = ServerProcess(path)
    process.start(timeout_s=300)
    try:
        load = eventloop.run(run_load(process.url, cell.concurrency, work))
    finally:
        process.stop()
    return {
        "key": cell.key, "routing": cell.routing, "concurrency": cell.concurrency, "memory": cell.memory,
        "system": cell.system, "policy": cell.policy, "kv_tokens": cell.kv_tokens,
        "throughput_tok_s": load.throughput_tok_s, "warmup_s": args.warmup_s, "window_s": load.window_s,
        "num_finished": load.num_finished, "num_failed": load.num_failed, "failures": load.failures,
        "e2e_p50_s": sorted(load.e2e_s)[len(load.e2e_s) // 2] if load.e2e_s else None,
        "kv": cell_memory([window_memory(load.metrics_after, load.metrics_before)]), "answers": load.answers,
    }  # fmt: skip


def predict(cell: GridCell, args: argparse.Namespace, lengths: Lengths) -> dict[str, Any]:
    """The simulator's throughput for the cell's twin, and its memory events."""
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in ("small", "large")}
    mean_output = lengths.mean_lengths()[1]
    lifetime = int(cell.concurrency * mean_output)
    started = time.perf_counter()
    result = simulate(sim_config(cell, profiles, lengths), tokens=max(20000, 4 * lifetime), warmup_tokens=lifetime)
    kv = (result.extra or {}).get("kv", {})
    return {"sim_tok_s": result.throughput_tok_s, "sim_wall_s": time.perf_counter() - started,
            "sim_kv": kv.get("models"), "sim_failed": kv.get("num_failed")}  # fmt: skip


def merge(out: Path, header: dict[str, Any], cells: list[dict[str, Any]], record: bool = True) -> dict[str, Any]:
    """The JSON at ``out`` with ``cells`` replacing those of the same key; with ``record`` the run's header is
    added to ``runs``."""
    doc = json.loads(out.read_text()) if out.exists() else {"runs": [], "cells": []}
    keys = {c["key"] for c in cells}
    doc["cells"] = [c for c in doc["cells"] if c["key"] not in keys] + cells
    if record:
        doc["runs"].append(header)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def grid_parser() -> argparse.ArgumentParser:
    """The grid's flags (``benchmarks/kv_admission_ab.py`` takes the engine, length and window ones too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--concurrency", default="32,64,128")
    parser.add_argument("--routings", default=",".join(ROUTINGS))
    parser.add_argument("--memory", default=",".join(MEMORY))
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--lengths", default="short-reasoning", help="the length preset (trsim.workload.PRESETS)")
    parser.add_argument("--scale", type=float, default=0.125, help="the preset's lengths times this")
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--profiles", default="docs/bench-emulated/memory/profiles")
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-emulated.json")
    parser.add_argument("--no-sim", action="store_true", help="measure only; predict later with --sim-only")
    parser.add_argument("--sim-only", action="store_true", help="predict the cells of --out that lack a prediction")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = grid_parser().parse_args(argv)
    lengths = Lengths(args.lengths, args.scale)
    roomy = int(load_profile(Path(args.profiles) / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    header = {"command": " ".join(["python", "benchmarks/kv_emulated.py", *(argv or sys.argv[1:])]),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1min_before": os.getloadavg()[0],
              "lengths": lengths.to_dict(), "roomy_kv_tokens": roomy, "routings": ROUTINGS}  # fmt: skip
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for routing in args.routings.split(","):
            for n in (int(x) for x in args.concurrency.split(",")):
                for cell in cells_for(routing, n, lengths, roomy, args.memory.split(","), args.systems.split(",")):
                    if args.sim_only:
                        continue
                    row = run_cell(cell, args, lengths, Path(tmp))
                    cells.append(row)
                    merge(Path(args.out), header, [row], record=False)  # on disk at once: a cut run keeps its cells
                    print(json.dumps({k: row[k] for k in ("key", "kv_tokens", "throughput_tok_s", "num_failed")}),
                          flush=True)  # fmt: skip
    header["load_1min_after"], header["finished"] = os.getloadavg()[0], time.strftime("%Y-%m-%dT%H:%M:%S%z")
    doc = merge(Path(args.out), header, []) if cells else json.loads(Path(args.out).read_text())
    if not args.no_sim:  # after the measurements, so the simulator's CPU never overlaps a window
        for row in doc["cells"]:
            if row.get("sim_tok_s") is None:
                cell = GridCell(row["routing"], row["concurrency"], row["memory"], row["system"], row["kv_tokens"])
                row.update(predict(cell, args, lengths))
                print(json.dumps({"key": row["key"], "sim_tok_s": row["sim_tok_s"]}), flush=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    write_report(doc, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
