"""A request that waits for KV memory is queued, not stalled: under ``admission-limit`` on pools that hold two or
three requests at a time, with ``server.stall_timeout_s`` shorter than the wait, every request is answered (the
watchdog used to fail the ones still waiting with a 504), and no stall is counted."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import yaml

from tests.serve.server_fixtures import running_server

pytestmark = pytest.mark.serve

NUM_REQUESTS = 12
MAX_TOKENS = 40  # with 8-token prompts 48 tokens: 3 blocks of 16 reserved per request against pools of 8 blocks
STALL_TIMEOUT_S = 1.0


def config() -> dict:
    models = [
        {"name": name, "block_size": 16, "max_num_seqs": 16, "emulated": {"latency_ms": ms, "kv_tokens": 128}}
        for name, ms in (("small", 10.0), ("large", 20.0))
    ]
    return {
        "mode": "routed", "backend": "emulated", "models": models,
        "router": {"program": "schedule", "params": {"handoff_prob": 0.2, "seed": 0}},
        "batching": {"thresholds": [1, 1], "max_wait_ms": 20.0},
        "server": {"max_active_requests": NUM_REQUESTS, "stall_timeout_s": STALL_TIMEOUT_S},
        "memory": {"policy": "admission-limit"},
    }  # fmt: skip


async def ask_all(url: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(k: int) -> httpx.Response:
            body = {"model": "tokenrouter", "prompt": [400 + 9 * k + i for i in range(8)], "max_tokens": MAX_TOKENS,
                    "temperature": 0, "ignore_eos": True, "routing_extra": {"decision_key": f"w{k}"}}  # fmt: skip
            return await client.post("/v1/completions", json=body)

        return await asyncio.gather(*(one(k) for k in range(NUM_REQUESTS)))


def test_requests_waiting_for_kv_longer_than_the_stall_timeout_are_answered(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config()))
    with running_server(path, timeout_s=300) as process:
        started = time.monotonic()
        responses = asyncio.run(ask_all(process.url))
        assert [r.status_code for r in responses] == [200] * NUM_REQUESTS, [r.text for r in responses if r.is_error]
        # Two requests fit at a time: the last ones waited for memory, without a token, for most of the run.
        assert time.monotonic() - started > 2 * STALL_TIMEOUT_S
        metrics = httpx.get(process.url + "/metrics").text
        assert "tokenrouter_requests_stalled_total 0.0" in metrics
        state = httpx.get(process.url + "/debug/state").json()
        waits = sum(w["memory"]["admission_waits"] for w in state["workers"])
        assert waits > 0, state["workers"]  # requests did wait for memory
