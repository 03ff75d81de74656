"""The overhead reference: the plain vLLM engine driven directly (``LLMEngine.step`` in a closed loop, vLLM's own
continuous batching, no TokenRouter scheduler, IPC or HTTP), on the same checkpoint, settings and cores as the
``llm-only`` system. Run as ``python -m trserve.bench.direct ARGS_JSON``; writes its result to a JSON file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trserve.bench.client import PROMPTS
from trserve.engine.tokenizer import Tokenizer
from trserve.entrypoints import worker_command
from trserve.model_config import ModelConfig
from trserve.runtime.placement import place_models
from trserve.runtime.runspec import resolve_model_path


def run_direct(args: dict[str, Any]) -> dict[str, float]:
    """Closed loop of ``concurrency`` requests of ``max_tokens`` tokens; tokens counted inside the window."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    engine_args = EngineArgs(model=args["model_path"], dtype=args["dtype"], max_model_len=args["max_model_len"],
                             block_size=args["block_size"], kv_cache_memory_bytes=int(args["kv_cache_gib"] * 2**30),
                             max_num_seqs=args["max_num_seqs"], enable_prefix_caching=True, enforce_eager=True,
                             seed=0, disable_log_stats=True)  # fmt: skip
    engine = LLMEngine.from_engine_args(engine_args)
    params = SamplingParams(max_tokens=args["max_tokens"], temperature=0.0, ignore_eos=True)
    prompts: list[list[int]] = args["prompts"]
    counter = iter(range(10**9))
    seen: dict[str, int] = {}

    def add() -> None:
        k = next(counter)
        rid = f"direct-{k}"
        seen[rid] = 0
        engine.add_request(rid, {"prompt_token_ids": prompts[k % len(prompts)]}, params)

    # Warm up as the StepEngine does (first forward passes are slow), then start the closed loop.
    warm = SamplingParams(max_tokens=4, temperature=0.0)
    for k in range(args["concurrency"]):  # every batch size up to N, as the closed loop will see them
        engine.add_request(f"warmup-{k}", {"prompt_token_ids": prompts[k % len(prompts)]}, warm)
    while engine.has_unfinished_requests():
        engine.step()
    for _ in range(args["concurrency"]):
        add()
    start = time.perf_counter()
    win_start, win_end = start + args["warmup_s"], start + args["warmup_s"] + args["window_s"]
    tokens = num_steps = 0
    while time.perf_counter() < win_end:
        outs = engine.step()
        num_steps += 1
        now = time.perf_counter()
        for out in outs:
            n = len(out.outputs[0].token_ids)
            if win_start <= now:
                tokens += n - seen[out.request_id]
            seen[out.request_id] = n
            if out.finished:
                del seen[out.request_id]
                add()
    elapsed = time.perf_counter() - win_start
    return {
        "throughput_tok_s": tokens / elapsed,
        "concurrency": args["concurrency"],
        "window_s": elapsed,
        "num_steps": num_steps,
        "tokens": tokens,
    }


def main() -> None:
    """``python -m trserve.bench.direct ARGS_JSON``: runs :func:`run_direct`, writes its result to
    ``args["result_path"]``."""
    args = json.loads(sys.argv[1])
    Path(args["result_path"]).write_text(json.dumps(run_direct(args)))


if __name__ == "__main__":
    main()


def run_direct_process(plan: Any, concurrency: int) -> dict[str, Any]:
    """Run :func:`run_direct` in a fresh process placed like the ``llm-only`` server (its model, its cores)."""
    import subprocess

    model = ModelConfig.model_validate(plan.base["models"][-1])
    path = resolve_model_path(model.path)
    placement = place_models([model])[0]
    tokenizer = Tokenizer(path)
    args = {"model_path": path, "dtype": model.dtype, "max_model_len": model.max_model_len,
            "block_size": model.block_size, "kv_cache_gib": model.kv_cache_gib, "max_num_seqs": model.max_num_seqs,
            "max_tokens": plan.workload.max_tokens, "warmup_s": plan.workload.warmup_s,
            "window_s": plan.workload.window_s * plan.repetitions, "concurrency": concurrency,
            "prompts": [tokenizer.encode(p) for p in PROMPTS]}  # fmt: skip
    env = {**os.environ, **placement.environment(), "PYTHONUNBUFFERED": "1"}
    cpus = set(placement.cpus)
    with tempfile.TemporaryDirectory(prefix="tokenrouter-direct-") as tmp:
        args["result_path"] = result_path = str(Path(tmp) / "result.json")
        proc = subprocess.run(
            worker_command("bench-direct", json.dumps(args)),
            capture_output=True, text=True, env=env, timeout=900,
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )  # fmt: skip
        if proc.returncode == 0 and Path(result_path).is_file():
            result: dict[str, Any] = json.loads(Path(result_path).read_text())
            return result
    raise RuntimeError(f"direct vLLM run failed (status {proc.returncode}):\n{proc.stderr[-2000:]}")
