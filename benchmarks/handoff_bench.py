"""Hand-off cost on a real vLLM engine: kept session (pending state) vs abort-and-re-add with prefix caching,
and the StepEngine's per-step overhead over the engine's own free-running step.

    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/handoff_bench.py [--model DIR] [--reps 7]

Writes benchmarks/results/handoff.json. Both modes run in one process and are interleaved rep by rep, so they
share the machine's noise; figures are medians. One thread pinned to one core (the CPU placement of a subserver).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trserve.engine.step_engine import StepEngine
from trserve.engine.types import EngineConfig, StepItem

OUT = Path(__file__).resolve().parent / "results" / "handoff.json"
TEXT_TOKENS = (200, 10_000)  # ordinary text-token ids of the SmolLM2 vocabulary
NUM_DECODE = 8
NUM_STEPS = 16


def tokens(seed: int, n: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(*TEXT_TOKENS) for _ in range(n)]


class Timing:
    """Wall and CPU milliseconds of calls. CPU time (this process, all threads) is what the ratios use: this
    machine is shared, and waiting for a core shows up in wall time only."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __call__(self, fn: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        self.cpu.append((time.process_time() - cpu) * 1e3)
        self.wall.append((time.perf_counter() - wall) * 1e3)
        return out

    def medians(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_cpu_ms": statistics.median(self.cpu), f"{prefix}_wall_ms": statistics.median(self.wall)}


def handoff_rep(engine: StepEngine, rid: str, prompt: list[int], peer: list[int], decode: Timing, back: Timing) -> None:
    """One request: prefill, NUM_DECODE decode steps, then the return step after a hand-off that brought ``peer``
    tokens (the request's last own token is re-sent with them, as the anchors contract says)."""
    tok = engine.step([StepItem(rid, prompt)])[0].token_id
    for _ in range(NUM_DECODE):
        tok = decode(lambda t=tok: engine.step([StepItem(rid, [t])]))[0].token_id
    back(lambda: engine.step([StepItem(rid, [tok, *peer])]))
    engine.release(rid)


def bench_handoff(engines: dict[str, StepEngine], lengths: list[int], reps: int, num_peer: int) -> list[dict]:
    rows = []
    for length in lengths:
        decode = {mode: Timing() for mode in engines}
        back = {mode: Timing() for mode in engines}
        plain = Timing()
        for rep in range(reps):
            prompt, peer = tokens(1000 * length + rep, length), tokens(-rep - 1, num_peer)
            for mode, engine in engines.items():
                handoff_rep(engine, f"h{length}-{rep}", prompt, peer, decode[mode], back[mode])
            plain_steps(engines["session"], [tokens(-1000 * length - rep, length)], plain, NUM_DECODE)
        row: dict[str, Any] = {"context_tokens": length, "peer_tokens": num_peer, "reps": reps}
        row |= plain.medians("plain_decode")
        context_at_return = length + NUM_DECODE + 1
        row["readmit_recomputed_tokens"] = context_at_return % engines["readmit"].config.block_size + num_peer + 1
        for mode in engines:
            row |= back[mode].medians(f"{mode}_return") | decode[mode].medians(f"{mode}_decode")
        row["return_cpu_ratio_readmit_over_session"] = row["readmit_return_cpu_ms"] / row["session_return_cpu_ms"]
        row["decode_cpu_ratio_readmit_over_session"] = row["readmit_decode_cpu_ms"] / row["session_decode_cpu_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def plain_steps(engine: StepEngine, prompts: list[list[int]], timing: Timing, num_steps: int = NUM_STEPS) -> None:
    """vLLM's own step with ``prompts`` decoding freely (non-resumable requests), ``num_steps`` times."""
    from trserve.engine.core_link import sampling_params

    link = engine._link
    for k, prompt in enumerate(prompts):
        params = sampling_params({}, engine.config.top_logprobs, f"plain{k}")
        params.max_tokens = num_steps + 1
        link.add(f"plain{k}", prompt, params, resumable=False)
    link.step()  # prefill
    for _ in range(num_steps):  # the last one finishes the requests and frees them
        timing(link.step)


def adapter_steps(engine: StepEngine, prompts: list[list[int]], timing: Timing) -> None:
    """``StepEngine.step`` for the same batch, one token per call, NUM_STEPS times."""
    rids = [f"a{k}" for k in range(len(prompts))]
    outs = engine.step([StepItem(rid, p) for rid, p in zip(rids, prompts, strict=True)])
    for _ in range(NUM_STEPS):
        items = [StepItem(rid, [o.token_id]) for rid, o in zip(rids, outs, strict=True)]
        outs = timing(lambda items=items: engine.step(items))
    for rid in rids:
        engine.release(rid)


def bench_overhead(plain: StepEngine, engines: dict[str, StepEngine], batches: list[int], reps: int) -> list[dict]:
    rows = []
    for batch in batches:
        timings = {name: Timing() for name in ("plain", *engines)}
        for rep in range(reps):
            prompts = [tokens(7000 + 100 * rep + k, 64) for k in range(batch)]
            plain_steps(plain, prompts, timings["plain"])
            for name, engine in engines.items():
                adapter_steps(engine, prompts, timings[name])
        row: dict[str, Any] = {"batch": batch, "context_tokens": "64-80"}
        for name, timing in timings.items():
            row |= timing.medians(f"{name}_step")
        for name in engines:
            row[f"{name}_overhead_cpu_ms"] = row[f"{name}_step_cpu_ms"] - row["plain_step_cpu_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="checkpoint directory (default: the prepared large model)")
    parser.add_argument("--lengths", default="128,512,1024")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--peer-tokens", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not args.model:
        from trserve.modelprep.pair import prepared_pair

        args.model = str(prepared_pair()[0])
    base = {"max_model_len": 2048, "kv_cache_gib": 0.5, "max_num_seqs": 16, "dtype": "float32"}

    def start(**kw: Any) -> StepEngine:
        return StepEngine(EngineConfig(args.model, **{**base, **kw}))  # type: ignore[arg-type]

    load_before, started = os.getloadavg()[0], time.perf_counter()
    session = start(handoff="session")
    start_s = time.perf_counter() - started
    readmit, no_entropy = start(handoff="readmit"), start(handoff="session", entropy=False)
    lengths = [int(x) for x in args.lengths.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    handoff = bench_handoff({"session": session, "readmit": readmit}, lengths, args.reps, args.peer_tokens)
    adapters = {"adapter": session, "adapter_no_entropy": no_entropy, "readmit": readmit}
    overhead = bench_overhead(no_entropy, adapters, batches, args.reps)
    result = {
        "model": Path(args.model).name,
        "engine": {**base, "block_size": session.config.block_size, "enforce_eager": True, "prefix_caching": True},
        "host": {
            "machine": platform.machine(),
            "cpus": sorted(os.sched_getaffinity(0)),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "first_engine_start_s": start_s,
        "handoff": handoff,
        "overhead": overhead,
    }
    for engine in (session, readmit, no_entropy):
        engine.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
