"""How much of the front end's CPU per token any Python server pays: TokenRouter beside floor servers that only
stream one SSE chunk per token, under the same load, alternating, in one run.

    .venv/bin/python benchmarks/stream_floor.py [-n 64] [--window-s 6] [--rounds 2]
        [--config configs/emulated-r2r-a100.yaml] [--out docs/bench-emulated/stream-floor.json]

Each round runs, in turn: ``tokenrouter serve`` on the emulated config (the paper's A100 latencies), then the
floor servers of ``benchmarks/stream_floor_servers.py`` (``asgi``: uvicorn + a bare ASGI app, a task per stream;
``raw-task``: an asyncio protocol, a task per stream; ``raw-direct``: the protocol, every chunk written by the step
itself), whose two in-process timers stand for the models (same step times and routing chain, no process
boundary). Each is driven by the bench's load generator (``n`` closed-loop streaming clients, 64-token requests)
and its CPU is read from /proc over the window, as ``tokenrouter bench`` reads it. The JSON has every run and, per
system, the median over rounds of tok/s and CPU per committed token (TokenRouter's per process); the floors'
figures are what streaming alone costs, with everything TokenRouter adds (the subservers, their messages, the
routing core, the book, the tokenizer, FastAPI, metrics) left out. Run it under the measurement lock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trserve import eventloop
from trserve.bench import cpu
from trserve.bench.client import Workload, run_load
from trserve.server.process import HttpChild, ServerProcess

FLOORS = ("asgi", "raw-task", "raw-direct")
SERVERS = Path(__file__).with_name("stream_floor_servers.py")


class FloorServer(HttpChild):
    """One floor server (``variant``) as a child process."""

    what = "floor server"

    def __init__(self, variant: str) -> None:
        super().__init__(None, f"stream-floor-{variant}-")
        self.variant = variant

    def start(self) -> None:
        cmd = [sys.executable, str(SERVERS), "--variant", self.variant, "--port", str(self.port)]
        self.launch_and_wait(cmd, dict(os.environ), timeout_s=60)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def measure(server: HttpChild, n: int, work: Workload) -> dict[str, Any]:
    """One closed-loop window against a started server: tok/s and CPU per token (per process)."""
    assert server.process is not None
    root = server.process.pid
    load = eventloop.run(run_load(server.url, n, work, lambda: cpu.snapshot(root)))
    window = cpu.window_cpu(load.probe_before, load.probe_after, load.metrics_before, load.metrics_after,
                            load.num_finished)  # fmt: skip
    tokens = window["tokens"]
    per_process = {k.split("#")[0]: 1e6 * v / tokens for k, v in window["per_process_cpu_s"].items()}
    return {
        "throughput_tok_s": load.throughput_tok_s,
        "server_cpu_us_per_token": window["server_cpu_us_per_token"],
        "per_process_us_per_token": per_process,
        "emulated_wait_us_per_token": 1e6 * window["emulated_wait_cpu_s"] / tokens,
        "client_cpu_us_per_token": window["client_cpu_us_per_token"],
        "tokens": tokens,
    }


def run_one(system: str, config: Path, n: int, work: Workload) -> dict[str, Any]:
    server: HttpChild = ServerProcess(config) if system == "tokenrouter" else FloorServer(system)
    server.start()  # type: ignore[attr-defined]
    try:
        return {"system": system, "started": time.strftime("%H:%M:%S"), **measure(server, n, work)}
    finally:
        server.stop()


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system: the median over its runs of tok/s, server CPU and front-end CPU per token; each floor's front
    end as a fraction of TokenRouter's."""
    out: dict[str, Any] = {}
    for system in ["tokenrouter", *FLOORS]:
        mine = [r for r in runs if r["system"] == system]
        if not mine:
            continue
        out[system] = {
            "throughput_tok_s": statistics.median(r["throughput_tok_s"] for r in mine),
            "server_cpu_us_per_token": statistics.median(r["server_cpu_us_per_token"] for r in mine),
            "front_end_us_per_token": statistics.median(r["per_process_us_per_token"]["frontend"] for r in mine),
            "runs": len(mine),
        }
    base = out.get("tokenrouter", {}).get("front_end_us_per_token")
    for system in FLOORS:
        if base and system in out:
            out[system]["of_tokenrouter_front_end"] = out[system]["front_end_us_per_token"] / base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--window-s", type=float, default=6.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--systems", default=",".join(["tokenrouter", *FLOORS]))
    parser.add_argument("--config", default="configs/emulated-r2r-a100.yaml")
    parser.add_argument("--out", default="docs/bench-emulated/stream-floor.json")
    args = parser.parse_args()
    work = Workload(args.max_tokens, warmup_s=args.warmup_s, window_s=args.window_s)
    runs = []
    for _ in range(args.rounds):
        for system in args.systems.split(","):
            runs.append(run_one(system, Path(args.config), args.n, work))
            r = runs[-1]
            procs = ", ".join(f"{k} {v:.1f}" for k, v in r["per_process_us_per_token"].items())
            print(f"{system}: {r['throughput_tok_s']:.0f} tok/s, {r['server_cpu_us_per_token']:.1f} us/token ({procs})")
    doc = {
        "command": "python benchmarks/stream_floor.py " + " ".join(sys.argv[1:]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": args.config,
        "concurrency": args.n,
        "max_tokens": args.max_tokens,
        "warmup_s": args.warmup_s,
        "window_s": args.window_s,
        "inputs": "this run: every figure is measured here; the floors' step times and routing chain are the "
        "config's (6.0 / 27.9 ms, P = [[0.65, 0.35], [1, 0]]), hard-coded in stream_floor_servers.py",
        "summary": summary(runs),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
