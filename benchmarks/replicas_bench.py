"""Throughput with replicas on emulated engines, beside the simulator's prediction; writes
benchmarks/results/replicas.json.

For every cell (small replicas x large replicas, default 1/2/4 x 1/2) and concurrency N: ``tokenrouter serve``
with ``configs/emulated-r2r-a100-replicas.yaml`` (the paper's A100 R2R step latencies as tables by batch size,
markov routing with R2R's P and C, thresholds of 1) and the cell's replica counts, driven by the bench's
closed-loop client (N streams of ``--max-tokens``-token greedy requests); throughput from the server's
committed-token counter over a window (the median of ``--repetitions`` windows), CPU per committed token of the
server's processes and of the load generator (the emulated wait's spin left out), steps per replica. The
prediction is the simulator with the same replicas, latency tables, routing matrices and pinning rule, and
closed-loop requests of the same lengths.

Run: ``flock /tmp/tokenrouter-measure.lock .venv/bin/python benchmarks/replicas_bench.py``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trserve.bench.client import Workload, metric_delta, run_load  # noqa: E402
from trserve.bench.cpu import emulation_accuracy, snapshot, window_cpu  # noqa: E402
from trserve.server.process import ServerProcess  # noqa: E402
from trsim.build import markov_config  # noqa: E402
from trsim.driver import simulate  # noqa: E402
from trsim.latency import TableModel  # noqa: E402
from trsim.lengths import constant  # noqa: E402
from trsim.workload import WorkloadConfig  # noqa: E402

CONFIG = ROOT / "configs" / "emulated-r2r-a100-replicas.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "replicas.json"
CELLS = ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2))
#: The bench client's prompts are 24-33 bytes; the stand-in tokenizer makes a token of each byte.
PROMPT_TOKENS = 28


def cell_config(base: dict[str, Any], small: int, large: int) -> dict[str, Any]:
    cfg = json.loads(json.dumps(base))
    cfg["models"][0]["replicas"], cfg["models"][1]["replicas"] = small, large
    return cfg


def predict(base: dict[str, Any], replicas: tuple[int, int], concurrency: int, max_tokens: int, tokens: int) -> dict:
    """The simulator on the config's own latency tables and routing matrices, with the cell's replicas."""
    lat = [m["emulated"]["latency_ms"] for m in base["models"]]
    models = [TableModel(list(range(1, len(ms) + 1)), [v / 1000 for v in ms]) for ms in lat]
    params = base["router"]["params"]
    workload = WorkloadConfig(concurrency=concurrency, prompt_tokens=constant(PROMPT_TOKENS),
                              output_tokens=constant(max_tokens))  # fmt: skip
    cfg = markov_config(params["P"], params["C"], models, base["batching"]["thresholds"], concurrency, workload)
    result = simulate(replace(cfg, replicas=replicas), tokens=tokens, warmup_tokens=tokens // 10)
    return {"sim_tok_s": round(result.throughput_tok_s, 1),
            "sim_mean_batch": [round(m.mean_batch, 2) for m in result.models],
            "sim_replica_steps": result.extra.get("replica_steps")}  # fmt: skip


async def measure(url: str, pid: int, concurrency: int, work: Workload) -> dict[str, Any]:
    load = await run_load(url, concurrency, work, probe=lambda: snapshot(pid))
    before, after = load.metrics_before, load.metrics_after
    cpu = window_cpu(load.probe_before, load.probe_after, before, after, load.num_finished)
    steps = metric_delta(after, before, "tokenrouter_steps_total")
    return {
        "measured_tok_s": round(load.throughput_tok_s, 1),
        "window_s": round(load.window_s, 2),
        "requests_finished": load.num_finished,
        "server_cpu_us_per_token": _round(cpu["server_cpu_us_per_token"]),
        "client_cpu_us_per_token": _round(cpu["client_cpu_us_per_token"]),
        "server_cpu_cores": round(cpu["server_cpu_s"] / load.window_s, 3),
        "client_cpu_cores": round(cpu["client_cpu_s"] / load.window_s, 3),
        "per_process_cpu_s": {k: round(v, 3) for k, v in cpu["per_process_cpu_s"].items()},
        "steps_per_replica": {k: int(v) for k, v in steps.items()},
        "emulated_step_ms": _rounded(emulation_accuracy(before, after)),
        "e2e_p50_s": round(sorted(load.e2e_s)[len(load.e2e_s) // 2], 3) if load.e2e_s else None,
    }


def _rounded(accuracy: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {m: {k: round(v, 3) for k, v in a.items()} for m, a in accuracy.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def run_cell(
    base: dict[str, Any], cell: tuple[int, int], concurrencies: list[int], work: Workload, repetitions: int
) -> list[dict]:
    """One server with the cell's replicas; per N the lower median of ``repetitions`` windows (all kept)."""
    with tempfile.TemporaryDirectory(prefix="replicas-bench-") as tmp:
        path = Path(tmp) / "serve.yaml"
        path.write_text(yaml.safe_dump(cell_config(base, *cell)))
        server = ServerProcess(path)
        server.start(timeout_s=120)
        try:
            assert server.process is not None
            rows = []
            for n in concurrencies:
                windows = [asyncio.run(measure(server.url, server.process.pid, n, work)) for _ in range(repetitions)]
                median = sorted(windows, key=lambda w: w["measured_tok_s"])[(len(windows) - 1) // 2]
                row = {"small_replicas": cell[0], "large_replicas": cell[1], "concurrency": n, **median,
                       "windows_tok_s": [w["measured_tok_s"] for w in windows]}  # fmt: skip
                rows.append(row)
                print(json.dumps({k: row[k] for k in list(row)[:7]}), flush=True)
            return rows
        finally:
            server.stop()


def markdown_table(results: dict[str, Any]) -> str:
    """The docs/benchmarks.md table of a written results file."""
    lines = [
        "| small x large replicas | N | measured tok/s (windows) | simulator tok/s | measured/sim "
        "| server CPU us/tok | load generator CPU us/tok | server + client cores | steps per replica (window) "
        "| small / large step ms (emulated -> measured) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results["rows"]:
        steps = ", ".join(f"{k} {v}" for k, v in sorted(r["steps_per_replica"].items(), key=_model_first))
        acc = r["emulated_step_ms"]
        small = [a for k, a in acc.items() if k.startswith("small")]
        large = [a for k, a in acc.items() if k.startswith("large")]
        ms = " / ".join(_step_ms(group) for group in (small, large))
        windows = ", ".join(f"{w:.0f}" for w in r["windows_tok_s"])
        cores = r["server_cpu_cores"] + r["client_cpu_cores"]
        lines.append(
            f"| {r['small_replicas']} x {r['large_replicas']} | {r['concurrency']} | {r['measured_tok_s']:.0f} "
            f"({windows}) | {r['sim_tok_s']:.0f} | {100 * r['measured_over_sim']:.0f}% | "
            f"{r['server_cpu_us_per_token']:.0f} | {r['client_cpu_us_per_token']:.0f} | {cores:.2f} | {steps} | {ms} |"
        )
    return "\n".join(lines)


def _model_first(item: tuple[str, int]) -> tuple[bool, str]:
    return (not item[0].startswith("small"), item[0])


def _step_ms(group: list[dict[str, float]]) -> str:
    steps = sum(a["steps"] for a in group)
    if not steps:
        return "-"
    emulated = sum(a["emulated_ms"] * a["steps"] for a in group) / steps
    measured = sum(a["measured_ms"] * a["steps"] for a in group) / steps
    return f"{emulated:.1f}->{measured:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="16,32", help="comma-separated N")
    parser.add_argument("--cells", default=",".join(f"{s}x{lg}" for s, lg in CELLS), help="SMALLxLARGE replicas")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--repetitions", type=int, default=3, help="windows per cell (the median is reported)")
    parser.add_argument("--sim-tokens", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="print the markdown table of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())))
        return
    base = yaml.safe_load(CONFIG.read_text())
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    cells = [tuple(int(x) for x in c.split("x")) for c in args.cells.split(",")]
    work = Workload(max_tokens=args.max_tokens, warmup_s=args.warmup_s, window_s=args.window_s)
    started, load_start = time.time(), os.getloadavg()
    rows = []
    for cell in cells:
        for row in run_cell(base, cell, concurrencies, work, args.repetitions):
            row.update(predict(base, cell, row["concurrency"], args.max_tokens, args.sim_tokens))
            row["measured_over_sim"] = round(row["measured_tok_s"] / row["sim_tok_s"], 3)
            rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = {
        "command": "flock /tmp/tokenrouter-measure.lock .venv/bin/python benchmarks/replicas_bench.py "
        + " ".join(sys.argv[1:]),
        "commit": commit,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {"cpus": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": os.getloadavg()},
        "inputs": {
            "config": str(CONFIG.relative_to(ROOT)),
            "latency": "the paper's A100 R2R step latencies as tables by batch size (trsim/scenarios/r2r-like.yaml: "
            "small 6.0/6.6/7.4/9.0 ms, large 27.9/29.5/31.5/36.0 ms at batch 1/4/8/16), linearly interpolated, "
            "last value beyond 16; the emulated engines and the simulator read the same list",
            "routing": "markov, P = [[0.65, 0.35], [1, 0]], C = [[1, 0], [1, 0]] (R2R's statistics)",
            "workload": f"closed loop, {args.max_tokens}-token greedy requests (ignore_eos), prompts of "
            f"~{PROMPT_TOKENS} tokens; per cell and N {args.repetitions} windows of {args.window_s} s, each after "
            f"{args.warmup_s} s of warm-up; the row is the median window's (every window's tok/s: windows_tok_s)",
            "simulator": f"{args.sim_tokens} tokens after a 10% warm-up, the same replicas and pinning rule",
        },
        "rows": rows,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
