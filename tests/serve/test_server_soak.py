"""A soak: 1,000 short requests at concurrency 32 are all answered, and nothing accumulates (KV, memory)."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from tests.serve.server_fixtures import MODEL, Served
from tests.serve.test_server_api import wait_idle

pytestmark = pytest.mark.serve

CONCURRENCY = 32
MAX_TOKENS = 4


@pytest.fixture(params=["hash", "vllm"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


async def run_requests(server: Served, count: int, offset: int) -> list[int]:
    """``count`` short requests, ``CONCURRENCY`` in flight; returns the completion token counts."""
    limit = asyncio.Semaphore(CONCURRENCY)
    async with server.async_client() as client:

        async def one(k: int) -> int:
            body = {"model": MODEL, "prompt": f"Request {offset + k}: the answer is", "max_tokens": MAX_TOKENS,
                    "temperature": 0, "ignore_eos": True, "routing_extra": {"handoff_prob": 0.25}}  # fmt: skip
            async with limit:
                response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return int(response.json()["usage"]["completion_tokens"])

        return await asyncio.gather(*(one(k) for k in range(count)))


def resident_memory(server: Served) -> dict[str, int]:
    """RSS of the front end and of every worker (with its children)."""
    assert server.process.process is not None
    rss = {"frontend": psutil.Process(server.process.process.pid).memory_info().rss}
    for worker in server.state()["workers"]:
        rss[f"worker{worker['model']}"] = worker["rss_bytes"]
    return rss


def test_soak_of_1000_short_requests(server: Served):
    asyncio.run(run_requests(server, 200, 0))  # warm-up: allocator pools, caches, code paths
    wait_idle(server)
    before = resident_memory(server)
    started = time.perf_counter()
    counts = asyncio.run(run_requests(server, 1000, 200))
    elapsed = time.perf_counter() - started
    assert counts == [MAX_TOKENS] * 1000  # every request answered in full
    state = wait_idle(server)
    assert [(w["num_resident"], w["kv_usage"]) for w in state["workers"]] == [(0, 0.0)] * len(state["workers"])
    after = resident_memory(server)
    grown = {k: after[k] - before[k] for k in before}
    print(f"soak ({server.backend}): 1000 requests in {elapsed:.1f} s; RSS growth (MiB):",
          {k: round(v / 2**20, 1) for k, v in grown.items()})  # fmt: skip
    for name, delta in grown.items():
        assert delta < max(48 * 2**20, before[name] // 20), f"{name} grew by {delta / 2**20:.1f} MiB"
