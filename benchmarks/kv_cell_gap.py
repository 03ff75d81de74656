"""Where one cell of the emulated KV grid loses against the simulator's window twin: per model the steps, mean
batch and step time, beside the requests' waits, real and simulated.

    python benchmarks/kv_cell_gap.py [--cell rare-long/N128/4x/admission-limit] [--repeats 2]
        [--out docs/bench-emulated/memory/kv-cell-gap.json]

The cell runs as ``benchmarks/kv_emulated.py`` runs it (its own server, the grid's warm-up and window, the same
lengths and routing schedules), ``--repeats`` times; each window's per-model figures come from the server's
``/metrics`` (steps, the batch-size histogram's sum and count, step seconds, host gaps). The twin is
``benchmarks/kv_emulated_stack.py``'s window twin with the stack probe's costs (``--stack``): the bench's requests,
each client's in its own order, from a cold start over the same warm-up and window. A closed loop's throughput is
N x tokens per request / time per request, so the split says whether the stack ran fewer requests at once (mean
batch), slower steps, or fewer steps (a model idle while work waited).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from trserve import eventloop
from trserve.bench.client import Workload, metric_delta, run_load
from trserve.bench.kv_grid import ROUTINGS, GridCell, cells_for, serve_config, sim_config
from trserve.bench.requests import Lengths
from trserve.crossval.stack import load_stack
from trserve.server.process import ServerProcess
from trsim.driver import Simulation
from trsim.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_emulated_stack import replay_sent, with_stack_costs

MODELS = ("small", "large")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default="rare-long/N128/4x/admission-limit")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lengths", default="short-reasoning")
    parser.add_argument("--scale", type=float, default=0.125)
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--profiles", default="docs/bench-emulated/memory/profiles")
    parser.add_argument("--stack", default="calibration/crossval/emulated-r2r-a100/stack.json")
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-cell-gap.json")
    return parser.parse_args()


def find_cell(key: str, lengths: Lengths, profiles: Path) -> GridCell:
    routing, n, memory, system = key.split("/")
    roomy = int(load_profile(profiles / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    cells = cells_for(routing, int(n.removeprefix("N")), lengths, roomy, [memory], [system])
    if not cells:
        raise SystemExit(f"--cell: no grid cell {key!r}")
    return cells[0]


def per_model(after: str, before: str) -> dict[str, dict[str, float]]:
    """Per model over the window: steps, mean batch, mean step and host gap (ms)."""

    def delta(name: str) -> dict[str, float]:
        return metric_delta(after, before, name)

    steps, batch_sum, step_s = delta("tokenrouter_steps_total"), delta("tokenrouter_batch_size_sum"), delta(
        "tokenrouter_step_seconds_sum")  # fmt: skip
    gap_sum, gap_n = delta("tokenrouter_host_gap_seconds_sum"), delta("tokenrouter_host_gap_seconds_count")
    return {m: {"steps": steps.get(m, 0.0), "mean_batch": batch_sum.get(m, 0.0) / max(1.0, steps.get(m, 0.0)),
                "mean_step_ms": 1000 * step_s.get(m, 0.0) / max(1.0, steps.get(m, 0.0)),
                "host_gap_ms": 1000 * gap_sum.get(m, 0.0) / max(1.0, gap_n.get(m, 0.0))}
            for m in MODELS if m in steps}  # fmt: skip


def measure(cell: GridCell, args: argparse.Namespace, lengths: Lengths, tmp: Path) -> dict[str, Any]:
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in MODELS}
    path = tmp / "cell.yaml"
    path.write_text(yaml.safe_dump(serve_config(cell, profiles, max(64, cell.concurrency))))
    routing = (ROUTINGS[cell.routing]["P"], ROUTINGS[cell.routing]["C"])
    work = Workload(warmup_s=args.warmup_s, window_s=args.window_s, lengths=lengths, routing=routing)
    process = ServerProcess(path)
    process.start(timeout_s=300)
    try:
        load = eventloop.run(run_load(process.url, cell.concurrency, work))
    finally:
        process.stop()
    return {"tok_s": load.throughput_tok_s, "window_s": load.window_s, "finished": load.num_finished,
            "failed": load.num_failed, "ttft_p50_s": median(load.ttft_s), "e2e_p50_s": median(load.e2e_s),
            "models": per_model(load.metrics_after, load.metrics_before)}  # fmt: skip


def simulate_twin(cell: GridCell, args: argparse.Namespace, lengths: Lengths, window_s: float) -> dict[str, Any]:
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in MODELS}
    config = with_stack_costs(sim_config(cell, profiles, lengths), load_stack(Path(args.stack), 2), cell)
    result = Simulation(replay_sent(config, cell, lengths)).run(time_s=args.warmup_s + window_s, warmup_s=args.warmup_s)
    return {"tok_s": result.throughput_tok_s, "finished": result.num_finished, "ttft_p50_s": result.ttft_p50_s,
            "e2e_p50_s": result.latency_p50_s,
            "models": {name: {"steps": s.steps, "mean_batch": s.mean_batch, "busy_fraction": s.busy_fraction,
                              "mean_step_ms": 1000 * s.busy_fraction * window_s / max(1, s.steps)}
                       for name, s in zip(MODELS, result.models, strict=False)}}  # fmt: skip


def median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def main() -> int:
    args = parse_args()
    lengths = Lengths(args.lengths, args.scale)
    cell = find_cell(args.cell, lengths, Path(args.profiles))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            runs.append(measure(cell, args, lengths, Path(tmp)))
            print(json.dumps(runs[-1]), flush=True)
    twin = simulate_twin(cell, args, lengths, runs[0]["window_s"])
    print(json.dumps(twin), flush=True)
    doc = {"command": "python benchmarks/kv_cell_gap.py " + " ".join(sys.argv[1:]), "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cell": cell.key, "kv_tokens": cell.kv_tokens,
           "stack_costs": args.stack, "measured": runs, "window_twin": twin}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
