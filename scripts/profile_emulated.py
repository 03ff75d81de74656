"""Where the serving stack's CPU goes at GPU speed: py-spy profiles of every server process under closed-loop load.

    .venv/bin/python scripts/profile_emulated.py [--config configs/emulated-r2r-a100.yaml] [-n 64] [--seconds 10]
        [--out docs/bench-emulated/profile-n64.json]

Starts ``tokenrouter serve`` on the (emulated) config, drives ``n`` closed-loop streaming clients (the bench's load
generator, in this process), and while the load runs records each server process with ``py-spy record --format
raw`` (active samples only: sleeping and waiting are not sampled). The JSON holds, per process, the CPU time
read from /proc over the window, the top functions by own samples and by inclusive samples, and per-area totals
(wire format, ZeroMQ, asyncio, HTTP, routing core, ...), plus the load generator's CPU per request. Run it under
the measurement lock.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from trserve import eventloop
from trserve.bench import cpu
from trserve.bench.client import Workload, committed_tokens, run_load
from trserve.server.process import ServerProcess

#: Substrings of a frame ("function (file:line)") that put its samples in an area.
AREAS = {
    "wire format (pickle / msgspec)": ("pickle", "msgspec", "encode (", "decode ("),
    "zeromq": ("zmq",),
    "asyncio event loop": ("asyncio/", "uvloop"),
    "http server (uvicorn/starlette/fastapi/h11)": ("uvicorn", "starlette", "fastapi", "h11", "httptools"),
    "json / pydantic": ("json", "pydantic"),
    "prometheus metrics": ("prometheus_client", "metrics.py"),
    "routing core (trcore)": ("trcore/",),
    "hash tokens (emulated engine)": ("hash.py", "blake2b"),
    "subserver loop": ("runtime/loop.py",),
    "front end book/streaming": ("frontend/book", "frontend/streaming", "frontend/generation", "frontend/text"),
}  # fmt: skip


def parse_raw(path: Path) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Own and inclusive sample counts per frame from py-spy's raw (collapsed) output, and the total."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if f]
        n = int(count)
        total += n
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return own, incl, total


def areas(incl: collections.Counter[str], own: collections.Counter[str], total: int) -> dict[str, float]:
    """Share of samples whose own frame falls in each area (first matching area wins), the rest as 'other'."""
    shares: dict[str, float] = collections.defaultdict(float)
    for frame, n in own.items():
        name = next((a for a, keys in AREAS.items() if any(k in frame for k in keys)), "other")
        shares[name] += n / total if total else 0.0
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def record(pids: dict[str, int], seconds: float, out_dir: Path) -> dict[str, subprocess.Popen[bytes]]:
    return {
        label: subprocess.Popen(
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                "200",
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(out_dir / f"{label}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for label, pid in pids.items()
    }


def with_stream_interval(config: Path, interval: int | None) -> Path:
    """``config``, or a copy of it (in a temporary directory) with ``server.stream_interval`` set."""
    if interval is None:
        return config
    doc = yaml.safe_load(config.read_text())
    doc.setdefault("server", {})["stream_interval"] = interval
    copy = Path(tempfile.mkdtemp(prefix="profile-config-")) / config.name
    copy.write_text(yaml.safe_dump(doc))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/emulated-r2r-a100.yaml")
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", default="docs/bench-emulated/profile-n64.json")
    parser.add_argument("--stream-interval", type=int, help="set server.stream_interval (tokens per SSE chunk)")
    args = parser.parse_args()
    server = ServerProcess(with_stream_interval(Path(args.config), args.stream_interval))
    server.start(timeout_s=300)
    tmp = Path(tempfile.mkdtemp(prefix="profile-"))
    try:
        assert server.process is not None
        root = server.process.pid
        pids = {("frontend" if p == root else cpu.role(p).replace(":", "-")): p for p in [root, *cpu.descendants(root)]}
        work = Workload(args.max_tokens, warmup_s=2.0, window_s=args.seconds + 1.0)

        async def load_and_record() -> tuple[object, dict[str, subprocess.Popen[bytes]]]:
            task = asyncio.create_task(run_load(server.url, args.n, work, lambda: cpu.snapshot(root)))
            await asyncio.sleep(2.5)
            spies = record(pids, args.seconds, tmp)
            return await task, spies

        load, spies = eventloop.run(load_and_record())
        for spy in spies.values():
            spy.wait(timeout=60)
    finally:
        server.stop()
    window = cpu.window_cpu(load.probe_before, load.probe_after, load.metrics_before, load.metrics_after,
                            load.num_finished)  # fmt: skip
    procs = {}
    for label in pids:
        raw = tmp / f"{label}.txt"
        if not raw.is_file():
            continue
        own, incl, total = parse_raw(raw)
        procs[label] = {
            "samples": total,
            "areas_by_own_samples": areas(incl, own, total),
            "top_own": [[f, n / total] for f, n in own.most_common(25)],
            "top_inclusive": [[f, n / total] for f, n in incl.most_common(40)],
        }
    doc = {
        "command": "python scripts/profile_emulated.py " + " ".join(sys.argv[1:]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": args.config,
        "concurrency": args.n,
        "stream_interval": args.stream_interval or 1,
        "throughput_tok_s": committed_tokens(load.metrics_after, load.metrics_before) / load.window_s,
        "window": window,
        "profiles": procs,
        "method": "py-spy record --format raw --rate 200 --nonblocking (idle frames are not sampled) on every "
        "server process for the middle of a closed-loop window; shares are of each process's own samples.",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {doc['throughput_tok_s']:.0f} tok/s, server CPU "
          f"{window['server_cpu_us_per_token']:.0f} us/token")  # fmt: skip


if __name__ == "__main__":
    main()
