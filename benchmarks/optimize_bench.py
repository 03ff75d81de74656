"""How long the throughput model's optimizer takes over the whole feasible threshold set.

    .venv/bin/python benchmarks/optimize_bench.py [--repeats 3] [--workers 1 2] [--reference m2_n16]

Scenarios: the issue's M = 2, N = 16 target (6.0 / 27.9 ms on a 0.1 ms quantum, R2R-like P and C; must finish
within 10 s on the 2-core machine) and M = 3, N = 8 (6 / 12 / 28 ms). Per scenario and worker count: wall and
CPU seconds of `ThroughputModel.optimize` (median and best of the repeats; CPU includes worker processes), the
states explored once for all candidates, the states of every candidate's chain, and where the time goes
(shared exploration vs reading off and solving each chain). ``--reference NAME`` also times the straightforward
method of tests/core/test_throughput_reference.py (pure-Python BFS per candidate, plain sparse solve) and
records the largest relative difference of the two methods' throughputs. Writes
benchmarks/results/optimize.json; the machine is shared, so CPU time is reported next to wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trcore.throughput import ThroughputModel, feasible_thresholds
from trcore.throughput.model import solve_in
from trcore.throughput.rules import AnyFeasible, FixedThresholds
from trcore.throughput.universe import explore

OUT = Path(__file__).resolve().parent / "results" / "optimize.json"
SCENARIOS: dict[str, dict[str, Any]] = {
    "m2_n16": {
        "P": [[0.65, 0.35], [1.0, 0.0]],
        "C": [[1.0, 0.0], [1.0, 0.0]],
        "latency_ms": [6.0, 27.9],
        "quantum_ms": 0.1,
        "concurrency": 16,
    },
    "m3_n8": {
        # SLM -> mid model -> LLM escalation: the SLM keeps its token when it stays, drops it when it escalates;
        # the mid model keeps its token unless it escalates; the LLM's token is always kept and it hands back.
        "P": [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [1.0, 0.0, 0.0]],
        "C": [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]],
        "latency_ms": [6.0, 12.0, 28.0],
        "quantum_ms": 0.1,
        "concurrency": 8,
    },
}


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def make_model(s: dict[str, Any]) -> ThroughputModel:
    return ThroughputModel(s["P"], s["C"], [x / 1000 for x in s["latency_ms"]], s["quantum_ms"] / 1000)


def time_optimize(s: dict[str, Any], workers: int, repeats: int) -> dict[str, Any]:
    model, walls, cpus = make_model(s), [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = model.optimize(s["concurrency"], workers=workers)
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_seconds() - cpu)
    states = [c.num_states for c in result.candidates]
    return {
        "workers": workers,
        "wall_s_median": statistics.median(walls),
        "wall_s_best": min(walls),
        "cpu_s_median": statistics.median(cpus),
        "best_thresholds": list(result.thresholds),
        "best_throughput_tok_s": result.throughput_tok_s,
        "num_candidates": len(states),
        "chain_states_total": sum(states),
        "chain_states_max": max(states),
    }


def breakdown(s: dict[str, Any]) -> dict[str, Any]:
    """Where one single-process optimize spends its time."""
    model, n = make_model(s), s["concurrency"]
    caps = model.spec.batch_caps(n)
    t0 = time.perf_counter()
    universe = explore(model.spec, n, AnyFeasible(n, caps))
    t1 = time.perf_counter()
    for b in feasible_thresholds(caps, n):
        solve_in(model.spec, universe, FixedThresholds(b, caps))
    t2 = time.perf_counter()
    return {
        "explore_s": t1 - t0,
        "read_off_and_solve_s": t2 - t1,
        "universe_states": universe.num_states,
        "universe_outcomes": len(universe.outcome_prob),
        "universe_decisions": len(universe.decision_set),
        "time_unit_ms": model.spec.unit_s * 1000,
        "latency_units": [list(t) for t in model.spec.latency_units],
    }


def reference(s: dict[str, Any]) -> dict[str, Any]:
    """The straightforward method on every candidate, and how far its throughputs are from the fast ones."""
    from tests.core.test_throughput_reference import reference_throughput

    model, n = make_model(s), s["concurrency"]
    quanta = [round(x / s["quantum_ms"]) for x in s["latency_ms"]]
    fast = {c.thresholds: c.throughput_tok_s for c in model.optimize(n).candidates}
    wall, cpu, worst = time.perf_counter(), cpu_seconds(), 0.0
    for b, rate in fast.items():
        expect, _ = reference_throughput(s["P"], s["C"], quanta, s["quantum_ms"] / 1000, n, b)
        worst = max(worst, abs(rate - expect) / expect)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": cpu_seconds() - cpu, "max_rel_diff": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument(
        "--reference", nargs="*", default=[], choices=list(SCENARIOS), help="also time the straightforward method"
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "command": "benchmarks/optimize_bench.py " + " ".join(sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()},
        "scenarios": {},
    }
    for name in args.scenarios:
        s = SCENARIOS[name]
        entry: dict[str, Any] = {"scenario": s, "breakdown": breakdown(s)}
        entry["runs"] = [time_optimize(s, w, args.repeats) for w in args.workers]
        if name in args.reference:
            entry["reference"] = reference(s)
        report["scenarios"][name] = entry
        print(name, json.dumps(entry["runs"]), flush=True)
    report["machine"]["load_avg_end"] = os.getloadavg()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
