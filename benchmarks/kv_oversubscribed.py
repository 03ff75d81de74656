"""The memory case on the real CPU pair: the default routed config with a KV cache smaller than the parked
sessions need, every spill policy beside a roomy run, same load, one run.

    python benchmarks/kv_oversubscribed.py [--requests 24] [--max-tokens 160] [--out benchmarks/results/kv.json]

For each (kv_cache_gib, memory.policy) cell it starts ``tokenrouter serve`` on the default config with only
those two fields changed, sends ``--requests`` concurrent greedy completions of ``--max-tokens`` tokens
(``ignore_eos``, temperature 0), and records how many were answered in full, whether each answer's tokens equal
the roomy run's, the throughput, and the subservers' KV counters (``/debug/state``). ``--gib`` lists the small
caches (default 0.1: the large model then holds about 2,300 tokens, the requests need about 4,100).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from trserve.server.defaults import default_config
from trserve.server.process import ServerProcess

PROMPT = "Write a long story about a lighthouse keeper and the sea."
POLICIES = ("cost", "lru", "admission-limit", "off")


async def load(url: str, num_requests: int, max_tokens: int) -> tuple[list[dict[str, Any]], float]:
    """``num_requests`` concurrent completions; returns each answer (or its error) and the wall time."""
    async with httpx.AsyncClient(base_url=url, timeout=1800.0) as client:

        async def one(i: int) -> dict[str, Any]:
            body = {"model": "tokenrouter", "prompt": f"{PROMPT} Chapter {i}.", "max_tokens": max_tokens,
                    "temperature": 0, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            if response.status_code != 200:
                return {"status": response.status_code, "error": response.text[:300]}
            choice = response.json()["choices"][0]
            return {"status": 200, "token_ids": choice["token_ids"]}

        started = time.perf_counter()
        answers = await asyncio.gather(*(one(i) for i in range(num_requests)))
        return list(answers), time.perf_counter() - started


def kv_state(url: str) -> list[dict[str, Any]]:
    state = httpx.get(f"{url}/debug/state", timeout=30.0).json()
    return [{"model": p.get("model"), "memory": p.get("memory", {})} for p in state.get("workers", [])]


def run_cell(gib: float, policy: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    data = default_config().model_dump(mode="json")
    for model in data["models"]:
        model["kv_cache_gib"] = gib
    data["memory"] = {"policy": policy}
    path = tmp / f"serve-{gib}-{policy}.yaml"
    path.write_text(yaml.safe_dump(data))
    server = ServerProcess(path)
    server.start(timeout_s=900)
    try:
        answers, wall_s = asyncio.run(load(server.url, args.requests, args.max_tokens))
        memory = kv_state(server.url)
    finally:
        server.stop()
    full = [a for a in answers if a["status"] == 200 and len(a["token_ids"]) == args.max_tokens]
    tokens = sum(len(a.get("token_ids", [])) for a in answers)
    return {"kv_cache_gib": gib, "policy": policy, "answered_in_full": len(full), "requests": args.requests,
            "wall_s": wall_s, "tok_s": tokens / wall_s, "answers": answers, "subservers": memory}  # fmt: skip


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell against the roomy one: answered, identical answers, throughput ratio."""
    roomy = cells[0]
    rows = []
    for cell in cells:
        same = sum(
            1
            for a, r in zip(cell["answers"], roomy["answers"], strict=True)
            if a.get("token_ids") is not None and a.get("token_ids") == r.get("token_ids")
        )
        rows.append({"kv_cache_gib": cell["kv_cache_gib"], "policy": cell["policy"],
                     "answered_in_full": f"{cell['answered_in_full']}/{cell['requests']}",
                     "identical_to_roomy": f"{same}/{cell['requests']}", "tok_s": round(cell["tok_s"], 1),
                     "vs_roomy": round(cell["tok_s"] / roomy["tok_s"], 3),
                     "spilled": sum(s["memory"].get("spilled", 0) for s in cell["subservers"]),
                     "preempted": sum(s["memory"].get("preempted", 0) for s in cell["subservers"]),
                     "recomputed_tokens": sum(s["memory"].get("recomputed_tokens", 0) for s in cell["subservers"]),
                     "admission_waits": sum(s["memory"].get("admission_waits", 0) for s in cell["subservers"]),
                     })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--roomy-gib", type=float, default=1.0)
    parser.add_argument("--gib", default="0.1", help="comma-separated small caches")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--out", default="benchmarks/results/kv_oversubscribed.json")
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        cells.append(run_cell(args.roomy_gib, "cost", args, Path(tmp)))
        for gib in (float(g) for g in args.gib.split(",")):
            for policy in policies:
                cells.append(run_cell(gib, policy, args, Path(tmp)))
                print(json.dumps(summarize([cells[0], cells[-1]])[-1]), flush=True)
    result = {"command": " ".join(["python", "benchmarks/kv_oversubscribed.py", *(argv or sys.argv[1:])]),
              "inputs": "this run: the default routed config on the local pair, kv_cache_gib and memory.policy "
              "changed", "summary": summarize(cells), "cells": cells}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for row in result["summary"]:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
