"""Killing a subserver: its in-flight requests fail with 503 and a clear message; new requests are refused with
503 + Retry-After while it restarts, then served again. Marked ``disruptive``: it kills processes of the shared
servers, so ``tests/serve/conftest.py`` runs it after every other test."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from tests.serve.server_fixtures import MODEL, Served

pytestmark = [pytest.mark.serve, pytest.mark.disruptive]

LONG = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": True,
        "routing_extra": {"handoff_prob": 0.5}}  # fmt: skip


@pytest.fixture(params=["hash", "vllm"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


async def in_flight_then_kill(server: Served, pid: int) -> tuple[list[httpx.Response], list[str]]:
    async with server.async_client() as client:
        plain = [asyncio.ensure_future(client.post("/v1/completions", json=LONG)) for _ in range(3)]
        stream_lines: list[str] = []

        async def streamed() -> None:
            async with client.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as response:
                async for line in response.aiter_lines():
                    if line:
                        stream_lines.append(line)

        stream = asyncio.ensure_future(streamed())
        deadline = time.monotonic() + 60
        while len(stream_lines) < 4 and time.monotonic() < deadline:  # everything is running
            await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        await stream
        return list(await asyncio.gather(*plain)), stream_lines


def test_killed_subserver_fails_in_flight_requests_then_restarts(server: Served):
    victim = next(w for w in server.state()["workers"] if w["model"] == 1)
    responses, lines = asyncio.run(in_flight_then_kill(server, victim["pid"]))
    for response in responses:
        assert response.status_code == 503, response.text
        assert "'small' exited unexpectedly" in response.json()["error"]["message"]
    assert any('"code":503' in line and "exited unexpectedly" in line for line in lines), lines[-3:]
    assert lines[-1] == "data: [DONE]"

    with server.client() as client:
        refused = client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        if refused.status_code == 503:  # still restarting (always so for vLLM: an engine takes many seconds)
            message = refused.json()["error"]["message"]
            assert refused.headers["retry-after"] and "'small' exited unexpectedly and is restarting" in message
            assert client.get("/health").status_code == 503
        deadline = time.monotonic() + 600
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the subserver did not come back"
            time.sleep(0.5)
        again = client.post("/v1/completions", json={**LONG, "max_tokens": 8})
        assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 8
        metrics = client.get("/metrics").text
    assert 'tokenrouter_model_restarts_total{model="small"} 1.0' in metrics
    workers = {w["model"]: w for w in server.state()["workers"]}
    assert workers[1]["pid"] != victim["pid"] and workers[1]["num_resident"] == 0
