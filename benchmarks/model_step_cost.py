"""Decode-step cost of the prepared local pair in vLLM on one CPU core, large and small side by side.

Per (model, batch size): time ``generate`` of ``batch`` greedy requests for ``--short`` and ``--long`` new tokens
(EOS ignored); the difference over the extra tokens is the cost of one decode step of that batch, prefill and
fixed costs cancelling out. Rounds alternate the models so machine noise hits both alike; the medians and the
small/large ratio are written as JSON (default ``benchmarks/results/model_step_cost.json``).

    .venv/bin/python benchmarks/model_step_cost.py --dtype float32 --batches 1,16 --rounds 5
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT = "Write a long story about a sailor who finds a map. Chapter {i}:"


def step_seconds(llm, batch: int, short: int, long: int) -> float:
    """One decode step of ``batch`` requests, from two generate calls of different lengths."""
    from vllm import SamplingParams

    prompts = [PROMPT.format(i=i) for i in range(batch)]
    timings = []
    for num_tokens in (short, long):
        params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        timings.append(time.perf_counter() - start)
    return (timings[1] - timings[0]) / (long - short)


def measure(args: argparse.Namespace) -> dict:
    from trserve.engine.local_llm import shutdown_local_llm, start_local_llm
    from trserve.modelprep.pair import prepared_pair

    batches = [int(b) for b in args.batches.split(",")]
    dirs = dict(zip(("large", "small"), prepared_pair(), strict=True))
    engines = {name: start_local_llm(str(d), dtype=args.dtype, max_num_seqs=max(batches)) for name, d in dirs.items()}
    samples: dict[str, dict[int, list[float]]] = {name: {b: [] for b in batches} for name in engines}
    for llm in engines.values():  # warm-up
        step_seconds(llm, max(batches), 2, 4)
    for _ in range(args.rounds):
        for batch in batches:
            for name, llm in engines.items():
                samples[name][batch].append(step_seconds(llm, batch, args.short, args.long))
    for llm in engines.values():
        shutdown_local_llm(llm)
    step_ms = {name: {b: 1000 * statistics.median(v) for b, v in per.items()} for name, per in samples.items()}
    return {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "dtype": args.dtype,
        "threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto (first allowed core)"),
        "load_average_1m_at_end": os.getloadavg()[0],
        "machine": platform.processor() or platform.machine(),
        "step_ms_median": step_ms,
        "step_ms_samples": {n: {b: [round(1000 * s, 2) for s in v] for b, v in p.items()} for n, p in samples.items()},
        "small_over_large": {b: step_ms["small"][b] / step_ms["large"][b] for b in batches},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--short", type=int, default=4)
    ap.add_argument("--long", type=int, default=36)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "model_step_cost.json")
    args = ap.parse_args()
    result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["step_ms_median"], indent=1), "\nsmall/large:", result["small_over_large"])


if __name__ == "__main__":
    main()
