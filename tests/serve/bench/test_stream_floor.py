"""The floor servers of benchmarks/stream_floor.py speak what the load generator reads: a chunked SSE answer of
exactly ``max_tokens`` text chunks, the usage chunk and ``[DONE]``, on keep-alive connections, with their token
counter in ``/metrics``; and the floor bench's summary puts each floor beside TokenRouter's front end."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from trserve import eventloop
from trserve.bench.client import committed_tokens
from trserve.bench.stream import Connection

pytestmark = pytest.mark.serve

ROOT = Path(__file__).resolve().parents[3]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Rec:
    first: float | None = None
    num_tokens = 0


async def _usage_counts(url: str, max_tokens: int, times: int) -> list[int]:
    """``times`` requests in a row on one keep-alive connection, read by the load generator's client."""
    conn = Connection(url)
    request = conn.request("/v1/completions", {"max_tokens": max_tokens, "stream": True})
    counts = []
    try:
        for _ in range(times):
            rec = Rec()
            await conn.stream(request, rec)
            counts.append(rec.num_tokens)
    finally:
        conn.close()
    return counts


@pytest.mark.parametrize("variant", ["asgi", "raw-task", "raw-direct"])
def test_a_floor_server_streams_exactly_the_tokens_asked_and_counts_them(variant: str) -> None:
    server = _module("stream_floor").FloorServer(variant)
    server.start()
    try:
        before = httpx.get(f"{server.url}/metrics").text
        counts = eventloop.run(_usage_counts(server.url, 7, times=3))
        sse = httpx.post(f"{server.url}/v1/completions", json={"max_tokens": 5, "stream": True}).text
        after = httpx.get(f"{server.url}/metrics").text
    finally:
        server.stop()
    assert counts == [7, 7, 7]
    events = [e for e in sse.split("\n\n") if e]
    assert [e.count('"text":" the"') for e in events] == [1] * 5 + [0, 0]
    assert '"completion_tokens":5' in events[-2] and events[-1] == "data: [DONE]"
    assert committed_tokens(after, before) == 26


def test_the_summary_puts_each_floor_beside_tokenrouters_front_end() -> None:
    summary = _module("stream_floor").summary
    runs = [
        {"system": "tokenrouter", "throughput_tok_s": 100.0, "server_cpu_us_per_token": 150.0,
         "per_process_us_per_token": {"frontend": 80.0, "worker:0": 70.0}},
        {"system": "tokenrouter", "throughput_tok_s": 110.0, "server_cpu_us_per_token": 170.0,
         "per_process_us_per_token": {"frontend": 100.0, "worker:0": 70.0}},
        {"system": "asgi", "throughput_tok_s": 105.0, "server_cpu_us_per_token": 45.0,
         "per_process_us_per_token": {"frontend": 45.0}},
    ]  # fmt: skip
    out = summary(runs)
    assert out["tokenrouter"]["front_end_us_per_token"] == 90.0 and out["tokenrouter"]["runs"] == 2
    assert out["asgi"]["of_tokenrouter_front_end"] == pytest.approx(0.5)
    assert "raw-direct" not in out
