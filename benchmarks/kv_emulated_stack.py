"""The emulated KV grid's cells predicted again, by the simulator with the serving stack's costs.

    python benchmarks/kv_emulated_stack.py [--grid docs/bench-emulated/memory/kv-emulated.json]
        [--stack calibration/crossval/emulated-r2r-a100/stack.json]
        [--out docs/bench-emulated/memory/kv-emulated-stack.json] [--orders 1]

Every committed cell of ``benchmarks/kv_emulated.py`` (its measured throughput is read, nothing is measured) is
simulated four times from the same twin (``trserve/bench/kv_grid.py`` ``sim_config``): an ideal stack and one with a
crossval stack probe's costs (``--stack``: host time per step and per request, hand-off transit, the client's turnaround
between a session's requests, delivery), each in steady state (the tokens and warm-up of the grid's own prediction) and
over the cell's own protocol (from a cold start: the grid's warm-up seconds, then the seconds the cell's window
measured; where a window holds a few request lifetimes or less, that is what the stack measured, not the steady state;
its requests are the ones the bench sent, lengths and routing schedules, each client's in its own order: the N first
ones at once, in the clients' order, then a client's next when its last ends). Where the window holds one or two turns
of a long admission queue, the order in which the N first requests arrive moves the window's throughput by several
percent; ``--orders k`` makes the window twin the mean over k seeded orders of the clients (order 0 is theirs;
``<sim>_orders_tok_s`` in each cell: every order's figure). The default is the clients' own order: at N = 8 under
``admission-limit`` it matched the stack exactly and other orders did not. The probe is another run of the same stack on
the same emulated engines (fixed 64-token requests at N = 2 and 16, a different hour), so the costs are out of sample
for every cell; the grid's windows fit nothing (their length is the protocol, not a result). Writes the measured and
simulated figures and their ratios per cell, and how many cells each simulator is within 5% of."""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trcore.traces import RequestTrace, TraceStep
from trserve.bench.kv_grid import ROUTINGS, GridCell, sim_config
from trserve.bench.requests import Lengths, request_body
from trserve.crossval.stack import StackCosts, load_stack
from trsim.build import with_traces
from trsim.config import SimConfig
from trsim.driver import Simulation, simulate
from trsim.lengths import LengthPairs
from trsim.plan_inputs import last_model_stack, with_stack

TOLERANCE = 0.05
#: The grid's warm-up seconds where a cell does not record its own (every committed run used the default).
GRID_WARMUP_S = 4.0
#: Requests per client the window twin replays (in the order sessions start), then cycles: at most about 8 fit in a
#: committed window (the fastest cell's 8,000 tok/s over 19 s of 158-token requests from 128 clients).
WINDOW_REQUESTS_PER_CLIENT = 16
#: (name, with the stack's costs, over the cell's own window): steady state as committed, and the cell's protocol.
SIMULATORS = (("sim", False, False), ("sim_stack", True, False), ("sim_window", False, True),
              ("sim_window_stack", True, True))  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="docs/bench-emulated/memory/kv-emulated.json")
    parser.add_argument("--stack", default="calibration/crossval/emulated-r2r-a100/stack.json")
    parser.add_argument("--profiles", default="docs/bench-emulated/memory/profiles")
    parser.add_argument("--out", default="docs/bench-emulated/memory/kv-emulated-stack.json")
    parser.add_argument("--orders", type=int, default=1, help="arrival orders the window twin averages over")
    args = parser.parse_args(argv)
    for name in ("grid", "stack"):
        if not Path(getattr(args, name)).is_file():
            parser.error(f"--{name}: {getattr(args, name)} is not a file")
    return args


def predict(
    row: dict[str, Any],
    stack: StackCosts | None,
    profiles: dict[str, Path],
    lengths: Lengths,
    window: bool = False,
    orders: int = 1,
) -> list[float]:
    """The simulator's throughput of one grid cell, with ``stack``'s costs or an ideal stack (None): in steady state
    (a lifetime's warm-up, then at least four; one figure), or with ``window`` over the cell's own protocol (from a
    cold start, the grid's warm-up seconds, then the cell's measured window seconds; one figure per arrival order of
    the first ``orders``)."""
    cell = GridCell(row["routing"], row["concurrency"], row["memory"], row["system"], row["kv_tokens"])
    config = sim_config(cell, profiles, lengths)
    if stack is not None:
        config = with_stack_costs(config, stack, cell)
    if window:
        warmup_s = row.get("warmup_s", GRID_WARMUP_S)
        return [Simulation(replay_sent(config, cell, lengths, seed)).run(time_s=warmup_s + row["window_s"],
                                                                         warmup_s=warmup_s).throughput_tok_s
                for seed in range(orders)]  # fmt: skip
    lifetime = int(cell.concurrency * lengths.mean_lengths()[1])
    return [simulate(config, tokens=max(20000, 4 * lifetime), warmup_tokens=lifetime).throughput_tok_s]


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
        measured = row["throughput_tok_s"]
        cell = {"key": row["key"], "measured_tok_s": measured}
        for name, costs, window in SIMULATORS:
            figures = predict(row, stack if costs else None, profiles, lengths, window, args.orders)
            cell[f"{name}_tok_s"] = predicted = statistics.mean(figures)
            cell[f"measured_over_{name}"] = measured / predicted
            if window and args.orders > 1:
                cell[f"{name}_orders_tok_s"] = figures
        cells.append(cell)
        print(json.dumps(cells[-1]), flush=True)
    doc = {"command": " ".join(["python", "benchmarks/kv_emulated_stack.py", *(argv or sys.argv[1:])]),
           "started": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "grid": args.grid,
           "stack": {"path": args.stack, **stack.to_dict()}, "summary": summary(cells), "cells": cells}  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"]))
    return 0


def with_stack_costs(config: SimConfig, stack: StackCosts, cell: GridCell) -> SimConfig:
    """``config`` with the stack probe's costs (the large model's alone for ``llm-only``) and the client's
    turnaround between a session's requests."""
    fields = stack.sim_fields()
    config = with_stack(config, last_model_stack(fields) if cell.system == "llm-only" else fields)
    return replace(config, workload=replace(config.workload, think_time_s=stack.client_turnaround_s))


def replay_sent(config: SimConfig, cell: GridCell, lengths: Lengths, order: int = 0) -> SimConfig:
    """``config`` sending the requests the bench sent (``trserve/bench/requests.py`` ``request_body``: client i's
    k-th request, all N first ones at t = 0, each client's next when its last ends): their lengths and, routed,
    their routing schedules replayed (trace replay, as the server's ``schedule`` router follows them: no P for the
    policy). ``order`` seeds the order in which the N first ones arrive (0: the clients' own)."""
    sent = arrival_order(sent_requests(cell.routing, cell.concurrency, cell.system != "llm-only", lengths),
                         cell.concurrency, order)  # fmt: skip
    if isinstance(sent, LengthPairs):
        config = replace(config, workload=replace(config.workload, pairs=sent))
    else:
        config = with_traces(config, sent)
    return replace(config, workload=replace(config.workload, pairs_by_client=True))


def arrival_order(sent: LengthPairs | list[RequestTrace], n: int, seed: int) -> LengthPairs | list[RequestTrace]:
    """``sent`` (client-major: client i's k-th request at k x n + i) with the clients' places shuffled by ``seed``,
    so their first requests arrive in another order and each keeps its own stream (seed 0: unchanged)."""
    places = list(range(n))
    if seed:
        random.Random(seed).shuffle(places)
    items = list(sent.pairs) if isinstance(sent, LengthPairs) else sent
    shuffled = [items[k * n + places[i]] for k in range(len(items) // n) for i in range(n)]
    return LengthPairs(tuple(shuffled)) if isinstance(sent, LengthPairs) else shuffled


@functools.cache
def sent_requests(routing: str, concurrency: int, routed: bool, lengths: Lengths) -> LengthPairs | list[RequestTrace]:
    """The bench's requests for :func:`replay_sent`, drawn once per routing and N (every policy and memory of a
    cell's row, with and without the stack's costs, sends the same): their lengths, or routed their traces."""
    schedule = (ROUTINGS[routing]["P"], ROUTINGS[routing]["C"]) if routed else None
    bodies = [request_body(lengths, i, k, schedule) for k in range(WINDOW_REQUESTS_PER_CLIENT)
              for i in range(concurrency)]  # fmt: skip
    if schedule is None:
        return LengthPairs(tuple((len(b["prompt"]), b["max_tokens"]) for b in bodies))
    return [RequestTrace(f"{k}", schedule_steps(b["routing_extra"]["schedule"]), len(b["prompt"]), b["max_tokens"])
            for k, b in enumerate(bodies)]  # fmt: skip


def schedule_steps(schedule: list[list[Any]], entry: int = 0) -> tuple[TraceStep, ...]:
    """A request's ``(destination, kept)`` schedule as trace steps (each made on the model the one before led to)."""
    steps, model = [], entry
    for dest, kept in schedule:
        steps.append(TraceStep(model, int(dest), bool(kept)))
        model = int(dest)
    return tuple(steps)


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per simulator: cells within :data:`TOLERANCE`, and the median and range of measured / simulated."""
    out = {}
    for name in (f"measured_over_{sim}" for sim, _, _ in SIMULATORS):
        ratios = [c[name] for c in cells]
        out[name] = {"within_5pct": sum(abs(r - 1) <= TOLERANCE for r in ratios), "cells": len(ratios),
                     "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
