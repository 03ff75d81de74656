"""What `tokenrouter sweep --ray-address` costs next to local worker processes, on this machine.

    flock /tmp/tokenrouter-measure.lock .venv/bin/python benchmarks/sweep_ray_bench.py [--tokens 20000] [--out F]

One sweep (the R2R-like flag system of `tokenrouter sweep`: every feasible threshold vector at one concurrency)
runs three ways: in this process, in 2 local worker processes (`--jobs 2`), and as Ray tasks on a two-node local
cluster (`ray.cluster_utils.Cluster`, one CPU per node, as tests/sim/test_ray_jobs.py). Per way: wall and CPU
seconds (CPU of this process and its children; the Ray nodes' workers are not its children, so the Ray row's
CPU is the driver's only) and whether the rows equal the in-process rows (wall-clock fields aside). The
cluster's start and the driver's connect are timed apart from the sweep. On a 2-core machine both nodes share
the two cores that `--jobs 2` uses, so this measures Ray's overhead, not a speed-up. Ray starts its task
workers at nice 15 (its ``worker_niceness``), so on a shared machine they yield to everything else;
``--worker-niceness 0`` starts the cluster with ``RAY_worker_niceness=0`` (as nice as the local runs). Writes
``--out`` (default benchmarks/results/sweep_ray.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray
from ray._private.ray_constants import RAY_WORKER_NICENESS
from ray.cluster_utils import Cluster

from trsim import markov_config
from trsim.parallel import JobRunner, LocalRunner
from trsim.ray_jobs import connect
from trsim.sweep import grid, run_sweep

OUT = Path(__file__).resolve().parent / "results" / "sweep_ray.json"  # the default --out
P, C, LATENCY_S = [[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279]


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_sweep(runner: JobRunner, configs: dict[str, Any], points: list[Any], tokens: int) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), cpu_s()
    rows = run_sweep(configs, points, tokens, runner=runner)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": cpu_s() - cpu, "rows": rows}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_s" and "per_wall" not in k} for row in rows]


def ray_sweep(configs: dict[str, Any], points: list[Any], tokens: int, niceness: int | None) -> dict[str, Any]:
    """The sweep on a fresh two-node local cluster (own temp dir), torn down afterwards."""
    tmp = tempfile.mkdtemp(prefix="trswb", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmp
    if niceness is not None:
        os.environ[RAY_WORKER_NICENESS] = str(niceness)
    start = time.perf_counter()
    head = {"num_cpus": 1, "include_dashboard": False, "gcs_server_port": free_port()}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        started = time.perf_counter()
        with connect(cluster.address) as runner:
            connected = time.perf_counter()
            out = timed_sweep(runner, configs, points, tokens)
        out.update(cluster_start_s=started - start, connect_s=connected - started, runner=runner.describe())
        return out
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=20_000, help="committed tokens per point")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker-niceness", type=int, default=None, help="Ray task workers' nice [Ray's: 15]")
    args = parser.parse_args()
    configs = {"flags": markov_config(P, C, LATENCY_S, [1, 1], args.concurrency, "endless")}
    points = grid(configs, [args.concurrency], None)
    load_before = os.getloadavg()
    runs = {
        "in_process": timed_sweep(LocalRunner(1), configs, points, args.tokens),
        "local_2_processes": timed_sweep(LocalRunner(2), configs, points, args.tokens),
        "ray_2_nodes_1_cpu": ray_sweep(configs, points, args.tokens, args.worker_niceness),
    }
    reference = comparable(runs["in_process"]["rows"])
    for run in runs.values():
        run["rows_equal_in_process"] = comparable(run.pop("rows")) == reference
    base = runs["in_process"]["wall_s"]
    for run in runs.values():
        run["speedup_vs_in_process"] = base / run["wall_s"]
    result = {
        "command": "benchmarks/sweep_ray_bench.py " + " ".join(sys.argv[1:]),
        "system": "R2R-like flags: P 0.65,0.35;1,0, C 1,0;1,0, 6.0/27.9 ms, endless requests",
        "concurrency": args.concurrency, "points": len(points), "tokens_per_point": args.tokens,
        "ray_worker_niceness": 15 if args.worker_niceness is None else args.worker_niceness,
        "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "ray": ray.__version__, "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": runs,
    }  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, run in runs.items():
        speedup, equal = run["speedup_vs_in_process"], run["rows_equal_in_process"]
        print(f"{name}: {run['wall_s']:.1f} s wall, x{speedup:.2f} vs in-process, rows equal: {equal}")


if __name__ == "__main__":
    main()
