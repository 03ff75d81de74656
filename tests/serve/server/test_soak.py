"""A soak: 1,000 short requests at concurrency 32 are all answered, and nothing accumulates (KV, memory)."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from tests.serve.server_fixtures import MODEL, Served, wait_idle

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


def resident_memory(server: Served) -> tuple[dict[str, int], dict[str, int]]:
    """RSS of the front end and of every worker, and the live Python objects of each subserver."""
    assert server.process.process is not None
    rss = {"frontend": psutil.Process(server.process.process.pid).memory_info().rss}
    objects = {}
    for worker in server.state(detail=True)["workers"]:
        rss[f"worker{worker['model']}"] = worker["rss_bytes"]
        objects[f"worker{worker['model']}"] = worker["engine"]["python_objects"]
    return rss, objects


def test_soak_of_1000_short_requests(server: Served):
    asyncio.run(run_requests(server, 200, 0))  # warm-up: allocator pools, caches, code paths
    wait_idle(server)
    rss_before, objects_before = resident_memory(server)
    started = time.perf_counter()
    counts = asyncio.run(run_requests(server, 1000, 200))
    elapsed = time.perf_counter() - started
    assert counts == [MAX_TOKENS] * 1000  # every request answered in full
    state = wait_idle(server)
    assert [(w["num_resident"], w["kv_usage"]) for w in state["workers"]] == [(0, 0.0)] * len(state["workers"])
    rss_after, objects_after = resident_memory(server)
    grown = {k: rss_after[k] - rss_before[k] for k in rss_before}
    print(f"soak ({server.backend}): 1000 requests in {elapsed:.1f} s; RSS growth (MiB):",
          {k: round(v / 2**20, 1) for k, v in grown.items()}, "Python objects:", objects_before, "->",
          objects_after)  # fmt: skip
    for name, count in objects_after.items():  # nothing per request survives it (the precise leak check)
        assert count - objects_before[name] < 200 + objects_before[name] // 50, (name, objects_before, objects_after)
    # Resident memory of a 2 GB engine process moves by tens of MiB either way with the allocator (measured:
    # +/-100 MiB over 500-request rounds, no trend). This bound catches leaks of ~200 KiB per request and more;
    # smaller leaks of Python objects show in the object count above.
    for name, delta in grown.items():
        assert delta < max(96 * 2**20, rss_before[name] // 12), f"{name} grew by {delta / 2**20:.1f} MiB"
