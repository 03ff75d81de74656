"""TokenRouter and vLLM's own OpenAI server, each driven by vLLM's own benchmark client (``vllm bench serve``).

    flock /tmp/tokenrouter-measure.lock .venv/bin/python scripts/vllm_bench_serve.py \
        [--num-prompts 64] [--concurrency 8] [--input-len 64] [--output-len 64] [--out docs/bench/vllm-client]

The issue's new-user trial, repeated with the project's servers: random 64-token prompts, 64 output tokens,
at most 8 in flight. Per server: ``tokenrouter serve`` on the default config (rstitch at its committed operating
point) and vLLM's OpenAI server on the large model (``trserve.bench.vllm_server``: both cores, float32, the same
``max_model_len``), each started, benchmarked twice by the same client command (first as a new user would, on
the freshly started server; then again, warm) and stopped. ``--ignore-eos`` makes both write every requested
token; ``--temperature 0`` decodes greedily, as the quality was measured. vLLM's client runs unchanged in its
own process (``python -m trserve.bench.vllm_client``; see there why not ``vllm bench serve``). Writes
``vllm_bench_serve.json`` (the settings, each run's summary figures and the
servers' commands) and vLLM's own result files beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trserve.bench.vllm_server import SERVED_NAME, VllmServer
from trserve.entrypoints import worker_command
from trserve.runtime.runspec import resolve_model_path
from trserve.server.defaults import DEFAULT_CONFIG, operating_point
from trserve.server.process import ServerProcess

#: What each run's summary keeps of vLLM's result (the rest stays in the result files).
KEEP = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
        "p99_tpot_ms", "median_itl_ms", "median_e2el_ms", "p99_e2el_ms", "max_concurrency")  # fmt: skip


def client_args(url: str, tokenizer: str, opts: argparse.Namespace, out: Path, name: str) -> list[str]:
    return ["--base-url", url, "--model", SERVED_NAME, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(opts.input_len), "--random-output-len", str(opts.output_len),
            "--num-prompts", str(opts.num_prompts), "--max-concurrency", str(opts.concurrency), "--ignore-eos",
            "--temperature", "0",
            "--seed", "0", "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
            "--result-filename", f"{name}.json"]  # fmt: skip


@contextmanager
def serving(system: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Start ``system`` (``tokenrouter``: the default config; ``vllm-server``: vLLM's own on the large model)."""
    server: ServerProcess | VllmServer
    server = ServerProcess(None) if system == "tokenrouter" else VllmServer(DEFAULT_CONFIG["models"][-1])
    started = time.monotonic()
    try:
        server.start(timeout_s=900)
        info: dict[str, Any] = {"startup_s": time.monotonic() - started}
        if isinstance(server, VllmServer):
            info.update(server.describe())
        else:
            point = operating_point(DEFAULT_CONFIG["router"]["program"])
            info.update(
                command="tokenrouter serve (the default config)",
                router=DEFAULT_CONFIG["router"],
                operating_point={k: point[k] for k in ("large_share", "accuracy", "relative_accuracy")},
            )
        yield server.url, info
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("docs/bench/vllm-client"))
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    tokenizer = resolve_model_path(DEFAULT_CONFIG["models"][-1]["path"])
    doc: dict[str, Any] = {"command": "python scripts/vllm_bench_serve.py " + " ".join(sys.argv[1:]),
                           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1min_before": os.getloadavg()[0],
                           "settings": vars(opts) | {"out": str(opts.out)}, "servers": {}, "runs": []}  # fmt: skip
    for system in ("tokenrouter", "vllm-server"):
        with serving(system) as (url, info):
            doc["servers"][system] = info
            for attempt in ("first", "warm"):
                name = f"{system}-{attempt}"
                args = client_args(url, tokenizer, opts, opts.out, name)
                proc = subprocess.run(worker_command("vllm-bench-serve", *args), capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"vLLM's client failed against {system}:\n{proc.stderr[-3000:]}")
                result = json.loads((opts.out / f"{name}.json").read_text())
                doc["runs"].append({"system": system, "attempt": attempt, "client_command": " ".join(args),
                                    **{k: result.get(k) for k in KEEP}})  # fmt: skip
                tok_s, ttft = result["output_throughput"], result["median_ttft_ms"]
                print(f"{name}: {tok_s:.1f} output tok/s, TTFT median {ttft:.0f} ms, "
                      f"{result['completed']}/{opts.num_prompts} requests")  # fmt: skip
    doc["load_1min_after"] = os.getloadavg()[0]
    (opts.out / "vllm_bench_serve.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {opts.out / 'vllm_bench_serve.json'}")


if __name__ == "__main__":
    main()
