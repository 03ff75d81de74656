"""Where one cell of the emulated KV grid loses against the simulator's window twin: per model the steps, mean batch and
step time, the requests resident and the KV blocks held, beside the requests' waits, real and simulated.

    python benchmarks/kv_cell_gap.py [--cell rare-long/N128/4x/admission-limit] [--repeats 2] [--orders 6]
        [--first-gap-ms 0] [--out docs/bench-emulated/memory/kv-cell-gap.json] [--sim-only]

The cell runs as ``benchmarks/kv_emulated.py`` runs it (its own server, the grid's warm-up and window, the same lengths
and routing schedules), ``--repeats`` times; each window's per-model figures come from the server's ``/metrics`` (steps,
the batch-size histogram's sum and count, step seconds, host gaps), and every :data:`SAMPLE_S` of the window
``/debug/state`` is read: per model the requests resident, those ready for a step, the core's blocks used and parked and
the new requests waiting for memory, averaged over the samples (the twin's core is read at the same instants of
simulated time). A server's loop answers between steps, so its ``num_ready`` holds the batch that just stepped and
stays; the twin's, read mid-step, does not: compare residents and blocks. The twin is
``benchmarks/kv_emulated_stack.py``'s window twin with the stack probe's costs (``--stack``): the bench's requests, each
client's in its own order, from a cold start over the same warm-up and window, and again with the N first requests
arriving in ``--orders`` - 1 other seeded orders (the window twin's ``--orders``). A closed loop's throughput is N x
tokens per request / time per request, so the split says whether the stack ran fewer requests at once (mean batch),
slower steps, or fewer steps (a model idle while work waited)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from trserve import eventloop
from trserve.bench.client import Workload, metric_delta, run_load
from trserve.bench.kv_grid import GridCell, cells_for, serve_config, sim_config
from trserve.bench.requests import Lengths
from trserve.crossval.stack import load_stack
from trserve.runtime.reports import memory_fields
from trserve.server.process import ServerProcess
from trsim.clock import to_ticks
from trsim.driver import Simulation
from trsim.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_emulated_stack import replay_sent, with_stack_costs

SAMPLE_S = 0.25
#: The per-model state fields averaged over the window's samples (``trserve.runtime.reports.loop_state``).
STATE_FIELDS = ("num_resident", "num_ready", "blocks_used", "blocks_parked", "waiting_admission")


def mean_state(samples: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per model the mean of each :data:`STATE_FIELDS` over ``samples`` (each ``{model: {field: value}}``)."""
    models = sorted({m for s in samples for m in s})
    return {m: {f: statistics.mean(s[m][f] for s in samples if m in s) for f in STATE_FIELDS} for m in models}


async def sample_states(url: str, names: list[str], start_s: float, end_s: float) -> list[dict[str, dict[str, float]]]:
    """``/debug/state`` every :data:`SAMPLE_S` from ``start_s`` to ``end_s`` (``time.perf_counter``); model ``i`` is
    called ``names[i]``."""
    samples = []
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        await asyncio.sleep(max(0.0, start_s - time.perf_counter()))
        while time.perf_counter() < end_s:
            workers = (await client.get("/debug/state")).json()["workers"]
            samples.append({names[w["model"]]: {**w.get("memory", {}), "num_resident": w["num_resident"],
                                                 "num_ready": w["num_ready"]} for w in workers})  # fmt: skip
            await asyncio.sleep(SAMPLE_S)
    return samples


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
    parser.add_argument("--first-gap-ms", type=float, default=0.0, help="client k's first request k x this late")
    parser.add_argument("--orders", type=int, default=6, help="arrival orders of the N first requests to simulate")
    parser.add_argument("--sim-only", action="store_true", help="simulate the twin of --out's runs again")
    return parser.parse_args()


def find_cell(key: str, lengths: Lengths, profiles: Path) -> GridCell:
    routing, n, memory, system = key.split("/")
    roomy = int(load_profile(profiles / "large.json").calibration["engine"]["kv_capacity_tokens"])  # type: ignore[index]
    cells = cells_for(routing, int(n.removeprefix("N")), lengths, roomy, [memory], [system])
    if not cells:
        raise SystemExit(f"--cell: no grid cell {key!r}")
    return cells[0]


def per_model(after: str, before: str, names: list[str]) -> dict[str, dict[str, float]]:
    """Per model over the window: steps, mean batch, mean step and host gap (ms), hand-off messages received, their
    mean transit (ms) and the share that missed a launch."""

    def delta(name: str) -> dict[str, float]:
        return metric_delta(after, before, name)

    steps, batch_sum, step_s = delta("tokenrouter_steps_total"), delta("tokenrouter_batch_size_sum"), delta(
        "tokenrouter_step_seconds_sum")  # fmt: skip
    gap_sum, gap_n = delta("tokenrouter_host_gap_seconds_sum"), delta("tokenrouter_host_gap_seconds_count")
    transit, received = delta("tokenrouter_handoff_transit_seconds_total"), delta("tokenrouter_handoffs_received_total")
    late = delta("tokenrouter_handoffs_late_total")
    return {m: {"steps": steps.get(m, 0.0), "mean_batch": batch_sum.get(m, 0.0) / max(1.0, steps.get(m, 0.0)),
                "mean_step_ms": 1000 * step_s.get(m, 0.0) / max(1.0, steps.get(m, 0.0)),
                "host_gap_ms": 1000 * gap_sum.get(m, 0.0) / max(1.0, gap_n.get(m, 0.0)),
                "handoffs_received": received.get(m, 0.0),
                "transit_ms": 1000 * transit.get(m, 0.0) / max(1.0, received.get(m, 0.0)),
                "late_share": late.get(m, 0.0) / max(1.0, received.get(m, 0.0))}
            for m in names if m in steps}  # fmt: skip


def measure(cell: GridCell, args: argparse.Namespace, lengths: Lengths, tmp: Path) -> dict[str, Any]:
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in ("small", "large")}
    path = tmp / "cell.yaml"
    path.write_text(yaml.safe_dump(serve_config(cell, profiles, max(64, cell.concurrency))))
    work = Workload(warmup_s=args.warmup_s, window_s=args.window_s, lengths=lengths, routing=cell.client_routing,
                    first_gap_s=args.first_gap_ms / 1000)  # fmt: skip
    process = ServerProcess(path)
    process.start(timeout_s=300)
    start = time.perf_counter()
    sampling = sample_states(
        process.url, cell.model_names, start + args.warmup_s, start + args.warmup_s + args.window_s
    )
    try:
        load, samples = eventloop.run(gather(run_load(process.url, cell.concurrency, work), sampling))
    finally:
        process.stop()
    return {"tok_s": load.throughput_tok_s, "window_s": load.window_s, "finished": load.num_finished,
            "failed": load.num_failed, "ttft_p50_s": median(load.ttft_s), "e2e_p50_s": median(load.e2e_s),
            "models": per_model(load.metrics_after, load.metrics_before, cell.model_names),
            "state": mean_state(samples), "num_samples": len(samples)}  # fmt: skip


async def gather(*aws: Any) -> Any:
    return await asyncio.gather(*aws)


def simulate_twin(
    cell: GridCell, args: argparse.Namespace, lengths: Lengths, window_s: float, order: int = 0
) -> dict[str, Any]:
    """The window twin's figures over the window alone, the N first requests arriving in seeded ``order``: the
    simulator counts steps from its start, so the run to the window's end less the same (seeded) run to the warm-up's
    end."""
    profiles = {n: Path(args.profiles) / f"{n}.json" for n in ("small", "large")}
    config = with_stack_costs(sim_config(cell, profiles, lengths), load_stack(Path(args.stack), 2), cell)
    config = replay_sent(config, cell, lengths, order)
    warm = Simulation(config).run(time_s=args.warmup_s)
    sim = Simulation(config)
    samples: list[dict[str, dict[str, float]]] = []
    sim.env.process(sample_core(sim, cell.model_names, args.warmup_s, samples))
    full = sim.run(time_s=args.warmup_s + window_s, warmup_s=args.warmup_s)
    models = {}
    for name, w, f in zip(cell.model_names, warm.models, full.models, strict=False):
        steps, request_steps = f.steps - w.steps, f.request_steps - w.request_steps
        busy_s = f.busy_fraction * (args.warmup_s + window_s) - w.busy_fraction * args.warmup_s
        models[name] = {"steps": steps, "mean_batch": request_steps / max(1, steps),
                        "mean_step_ms": 1000 * busy_s / max(1, steps), "busy_s": busy_s}  # fmt: skip
    return {"order": order, "tok_s": full.throughput_tok_s, "finished": full.num_finished,
            "ttft_p50_s": full.ttft_p50_s, "e2e_p50_s": full.latency_p50_s, "models": models,
            "state": mean_state(samples), "num_samples": len(samples)}  # fmt: skip


def twins(cell: GridCell, args: argparse.Namespace, lengths: Lengths, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The twin in each of the window twin's arrival orders, and their mean throughput."""
    window_s = statistics.mean(r["window_s"] for r in runs)
    each = [simulate_twin(cell, args, lengths, window_s, k) for k in range(args.orders)]
    return {"mean_tok_s": statistics.mean(t["tok_s"] for t in each), "orders": each}


def sample_core(sim: Simulation, names: list[str], start_s: float, samples: list[dict[str, dict[str, float]]]) -> Any:
    """A SimPy process: the twin's cores read as ``/debug/state`` reads the server's, every :data:`SAMPLE_S`."""
    yield sim.env.timeout(to_ticks(start_s))
    while True:
        cores = zip(names, sim.subservers, strict=False)
        samples.append({name: {**memory_fields(sub.memory), "num_resident": len(sub.requests),
                               "num_ready": sub.num_ready} for name, sub in cores})  # fmt: skip
        yield sim.env.timeout(to_ticks(SAMPLE_S))


def median(values: list[float]) -> float | None:
    return statistics.median_high(values) if values else None


def main() -> int:
    args = parse_args()
    lengths = Lengths(args.lengths, args.scale)
    cell = find_cell(args.cell, lengths, Path(args.profiles))
    if args.sim_only:
        doc = json.loads(Path(args.out).read_text())
        doc["window_twin"] = twins(cell, args, lengths, doc["measured"])
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc["window_twin"]["mean_tok_s"]))
        return 0
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            runs.append(measure(cell, args, lengths, Path(tmp)))
            print(json.dumps(runs[-1]), flush=True)
    twin = twins(cell, args, lengths, runs)
    print(json.dumps(twin["mean_tok_s"]), flush=True)
    doc = {"command": "python benchmarks/kv_cell_gap.py " + " ".join(sys.argv[1:]), "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cell": cell.key, "kv_tokens": cell.kv_tokens,
           "stack_costs": args.stack, "measured": runs, "window_twin": twin}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
