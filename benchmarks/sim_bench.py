"""Simulator benchmarks; writes benchmarks/results/sim.json (each part replaces its own section).

* ``speed``: wall time to simulate 1,000,000 committed tokens of the R2R-like pair (N = 16, constant
  6.0 / 27.9 ms, P = [[0.65, 0.35], [1, 0]], C = [[1, 0], [1, 0]]), endless and short-reasoning requests;
  target: at most 10 s.
* ``baselines``: TokenRouter at its best thresholds against lockstep, per-token serving, LLM-only and B = 1,
  side by side in one process, with batch-dependent latencies (trsim/scenarios/r2r-like.yaml), plus the
  simulator's speed on each.
* ``model``: simulated throughput against the analytic model for N = 1..8 and every feasible threshold
  vector of the R2R pair, and for every feasible vector of a three-model system at N = 4; long runs
  (default 400,000 tokens each) in worker processes; the B* a simulated sweep picks against ``optimize``.

Run: ``.venv/bin/python benchmarks/sim_bench.py [speed|baselines|model ...] [--tokens N] [--jobs J]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trsim import apply_baseline, markov_config, simulate  # noqa: E402
from trsim.check import compare_point  # noqa: E402
from trsim.scenario import load_scenario, scenario_config  # noqa: E402
from trsim.sweep import feasible_thresholds  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sim.json"
R2R = ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279])
THREE = (
    [[0.8, 0.15, 0.05], [0.6, 0.3, 0.1], [0.5, 0.2, 0.3]],
    [[1.0, 0.5, 0.0], [1.0, 1.0, 0.5], [1.0, 1.0, 1.0]],
    [0.005, 0.012, 0.03],
)


def speed(tokens: int = 1_000_000) -> dict[str, object]:
    out: dict[str, object] = {"tokens": tokens, "target_wall_s": 10.0}
    for workload in ("endless", "short-reasoning"):
        config = markov_config(*R2R[:2], R2R[2], [1, 1], 16, workload)
        cpu = time.process_time()
        result = simulate(config, tokens=tokens)
        out[workload] = {
            "wall_s": round(result.wall_s, 3),
            "cpu_s": round(time.process_time() - cpu, 3),
            "sim_tokens_per_wall_s": round(result.sim_tokens_per_wall_s),
            "throughput_tok_s": round(result.throughput_tok_s, 2),
        }
        print(f"speed {workload}: {tokens} tokens in {result.wall_s:.2f} s wall", flush=True)
    return out


def baselines(tokens: int = 200_000) -> dict[str, object]:
    path = ROOT / "trsim" / "scenarios" / "r2r-like.yaml"
    base = scenario_config(load_scenario(path), path.parent)
    rows = {}
    # B*: a simulated sweep of every feasible vector (shorter runs), then the long side-by-side runs.
    candidates = {
        b: simulate(base.with_thresholds(b), tokens=tokens // 4).throughput_tok_s for b in feasible_thresholds(2, 16)
    }
    b_star = max(candidates, key=lambda b: candidates[b])
    for name in ("tokenrouter", "b1", "lockstep", "per-token", "llm-only"):
        config = apply_baseline(base.with_thresholds(b_star), name)
        r = simulate(config, tokens=tokens)
        rows[name] = {
            "thresholds": list(config.thresholds),
            "throughput_tok_s": round(r.throughput_tok_s, 2),
            "latency_p50_s": r.latency_p50_s,
            "latency_p99_s": r.latency_p99_s,
            "ttft_p50_s": r.ttft_p50_s,
            "tpot_p50_s": r.tpot_p50_s,
            "handoffs_per_token": round(r.handoffs_per_token, 4),
            "busy_fraction": [round(m.busy_fraction, 3) for m in r.models],
            "sim_tokens_per_wall_s": round(r.sim_tokens_per_wall_s),
        }
        print(f"baseline {name}: {r.throughput_tok_s:.1f} tok/s", flush=True)
    tr = rows["tokenrouter"]["throughput_tok_s"]
    for row in rows.values():
        row["tokenrouter_speedup"] = round(tr / row["throughput_tok_s"], 3)  # type: ignore[operator]
    return {"scenario": str(path.relative_to(ROOT)), "tokens": tokens, "b_star": list(b_star), "runs": rows}


def _compare(args: tuple[str, tuple, int, tuple[int, ...], int]) -> dict[str, object]:
    name, system, n, thresholds, tokens = args
    P, C, latency = system
    row = compare_point(P, C, latency, n, thresholds, tokens, seed=1000 + n)  # common numbers across B at one N
    return {"system": name, **row}


def model(tokens: int = 400_000, jobs: int = 2) -> dict[str, object]:
    from trsim.check import model_optimum

    tasks = [("r2r", R2R, n, b, tokens) for n in range(1, 9) for b in feasible_thresholds(2, n)]
    tasks += [("three", THREE, 4, b, tokens) for b in feasible_thresholds(3, 4)]
    started = time.time()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(_compare, tasks))
    picks = []
    for name, system, n in [("r2r", R2R, n) for n in range(1, 9)] + [("three", THREE, 4)]:
        mine = [r for r in rows if r["system"] == name and r["concurrency"] == n]
        sim_best = max(mine, key=lambda r: r["sim_tok_s"])
        opt = model_optimum(*system, n)
        model_of = {tuple(r["thresholds"]): r["model_tok_s"] for r in mine}
        picks.append(
            {
                "system": name,
                "concurrency": n,
                "sim_b_star": sim_best["thresholds"],
                "model_b_star": list(opt),
                "same": tuple(sim_best["thresholds"]) == opt,
                "model_loss_of_sim_pick": 1 - model_of[tuple(sim_best["thresholds"])] / model_of[opt],
            }
        )
    worst = max(abs(r["rel_diff"]) for r in rows)
    print(
        f"model: {len(rows)} points, worst |rel diff| {worst:.4f}, "
        f"B* agree {sum(p['same'] for p in picks)}/{len(picks)}",
        flush=True,
    )
    return {
        "tokens_per_point": tokens,
        "num_points": len(rows),
        "max_abs_rel_diff": worst,
        "within_1pct": all(abs(r["rel_diff"]) < 0.01 for r in rows),
        "b_star": picks,
        "wall_s": round(time.time() - started, 1),
        "points": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["speed", "baselines", "model"])
    parser.add_argument("--tokens", type=int, default=None, help="tokens per run (each part has a default)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],  # shared machine: wall times vary
    }
    kwargs = {"tokens": args.tokens} if args.tokens else {}
    for part in args.parts:
        if part == "model":
            results[part] = model(jobs=args.jobs, **kwargs)
        else:
            results[part] = {"speed": speed, "baselines": baselines}[part](**kwargs)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
