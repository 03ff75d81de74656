"""The bench's ``vllm-server`` system for real: vLLM's own OpenAI server on the prepared large model starts,
answers, is counted and driven by the bench's closed-loop client, runs vLLM's own benchmark client, and is
stopped with every process it started; a port picked for it that another process took first is replaced.
One server start serves the four tests (run them under
``flock /tmp/tokenrouter-measure.lock``). The first start on a machine compiles the model (vLLM's default
``torch.compile`` on CPU, cached in ~/.cache/vllm): minutes; later starts reuse the cache."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trserve.bench.client import Workload, committed_tokens, run_load
from trserve.bench.vllm_server import VllmServer, group_members
from trserve.entrypoints import worker_command
from trserve.server import process as process_module
from trserve.server.defaults import DEFAULT_CONFIG

pytestmark = pytest.mark.serve  # vLLM's own server on the prepared large model


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port another process listens on, handed to the server as the first 'free' port it picks."""
    with socket.socket() as taken, pytest.MonkeyPatch.context() as patch:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port])
        real = process_module.free_port
        patch.setattr(process_module, "free_port", lambda: next(picks, None) or real())
        yield port


@pytest.fixture(scope="module")
def vllm_openai(prepared_pair: tuple[Path, Path], busy_port: int) -> Iterator[VllmServer]:
    # The bench's settings (max_model_len included), so vLLM's compile cache serves the bench's later starts too.
    large = {**DEFAULT_CONFIG["models"][-1], "path": str(prepared_pair[0])}
    server = VllmServer(large)
    assert server.port == busy_port
    try:
        server.start(timeout_s=900)
        yield server
    finally:
        server.stop()


def test_a_picked_port_taken_before_it_bound_it_was_replaced(vllm_openai: VllmServer, busy_port: int) -> None:
    assert vllm_openai.port != busy_port and f"--port {vllm_openai.port}" in " ".join(vllm_openai.command)
    assert vllm_openai.is_healthy()


def test_it_answers_and_the_bench_counts_its_tokens(vllm_openai: VllmServer) -> None:
    body = {"model": "tokenrouter", "prompt": "The capital of France is", "max_tokens": 5, "temperature": 0.0,
            "ignore_eos": True}  # fmt: skip
    before = httpx.get(f"{vllm_openai.url}/metrics", timeout=30).text
    answer = httpx.post(f"{vllm_openai.url}/v1/completions", json=body, timeout=300).json()
    after = httpx.get(f"{vllm_openai.url}/metrics", timeout=30).text
    assert answer["usage"]["completion_tokens"] == 5 and answer["choices"][0]["text"]
    # The bench's throughput counter, read from vLLM's own /metrics, saw exactly the tokens of that request.
    assert committed_tokens(after, before) == 5


def test_the_bench_client_drives_it(vllm_openai: VllmServer) -> None:
    load = asyncio.run(run_load(vllm_openai.url, 2, Workload(max_tokens=8, warmup_s=0.5, window_s=2.0)))
    assert load.throughput_tok_s > 0 and all(t > 0 for t in load.ttft_s)


def test_vllm_bench_client_runs_unchanged_against_it(vllm_openai: VllmServer, tmp_path: Path,
                                                     prepared_pair: tuple[Path, Path]) -> None:  # fmt: skip
    args = ["--base-url", vllm_openai.url, "--model", "tokenrouter", "--tokenizer", str(prepared_pair[0]),
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "4", "--num-prompts", "4",
            "--max-concurrency", "2", "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir",
            str(tmp_path), "--result-filename", "result.json"]  # fmt: skip
    proc = subprocess.run(worker_command("vllm-bench-serve", *args), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["completed"] == 4 and result["total_output_tokens"] == 16
    assert result["output_throughput"] > 0 and result["median_ttft_ms"] > 0


def test_stop_ends_the_server_and_its_engine_core(vllm_openai: VllmServer) -> None:
    assert vllm_openai.process is not None
    pid = vllm_openai.process.pid
    assert len(group_members(pid)) >= 2  # the API server and the engine-core process it started
    vllm_openai.stop()
    assert vllm_openai.process.returncode is not None
    assert group_members(pid) == []
    assert not vllm_openai.is_healthy()
