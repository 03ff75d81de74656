"""``handoff: readmit`` through the whole server on the local pair (vLLM): every hand-off re-adds the request with
its whole sequence (prefix caching), and the answers equal the reference loop's (transformers, the same per-token
decisions), including across a restart of one model's process mid-request.

Marked ``disruptive``: it kills a worker of its own server, and runs after the others so its engines start when
the shared servers' are busy no more."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.serve.engine_support import model_dirs, sample_prompts
from tests.serve.server.test_correctness import SCHEDULES, next_token_for, reference
from tests.serve.server.test_restart import marked_down
from tests.serve.server_fixtures import MODEL, Served, server_config, start_served
from trserve.bench.client import metric_values

pytestmark = [pytest.mark.serve, pytest.mark.disruptive]

MAX_TOKENS = 12
#: Long enough that the requests are mid-way when the kill lands (a few of the large model's steps each).
RESTART_TOKENS = 24


@pytest.fixture(scope="module")
def readmit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    dirs = model_dirs()
    config = {**server_config(dirs), "handoff": "readmit"}
    yield from start_served(tmp_path_factory.mktemp("readmit-server"), config, dirs)


def body(prompt: list[int], extra: dict, max_tokens: int) -> dict:
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "routing_extra": extra}  # fmt: skip


async def answers(
    server: Served, prompts: list[list[int]], extras: list[dict], max_tokens: int = MAX_TOKENS
) -> list[list[int]]:
    async with server.async_client(timeout=900.0) as client:

        async def one(prompt: list[int], extra: dict) -> list[int]:
            response = await client.post("/v1/completions", json=body(prompt, extra, max_tokens))
            assert response.status_code == 200, response.text
            return list(response.json()["choices"][0]["token_ids"])

        return list(await asyncio.gather(*(one(p, e) for p, e in zip(prompts, extras, strict=True))))


def test_readmit_answers_equal_the_reference_loop(readmit_server: Served):
    server = readmit_server
    prompts = sample_prompts()[: len(SCHEDULES)]
    got = asyncio.run(answers(server, prompts, [{"schedule": s} for s in SCHEDULES]))
    next_token = next_token_for(server)
    for prompt, schedule, tokens in zip(prompts, SCHEDULES, got, strict=True):
        assert tokens == reference(next_token, prompt, "", MAX_TOKENS, schedule)
    with server.client() as client:
        metrics = client.get("/metrics").text
    assert 'tokenrouter_handoffs_total{model="small"}' in metrics  # the schedules moved every request both ways


def test_readmit_requests_survive_a_restart_with_the_reference_tokens(readmit_server: Served):
    """Requests with random keyed hand-offs; once they have committed a few tokens, the small model's process is
    killed. They pause while it restarts (resumed from the front end's record) and end with the reference loop's
    tokens."""
    server = readmit_server
    prompts = [[*p, 300 + k] for k, p in enumerate(sample_prompts()[:4])]
    extras = [{"handoff_prob": 0.3, "decision_key": f"readmit-{k}"} for k in range(len(prompts))]
    victim = 1
    pid = next(w["pid"] for w in server.state()["workers"] if w["model"] == victim)

    async def run() -> list[list[int]]:
        async with server.async_client(timeout=900.0) as client:
            before = committed(await client.get("/metrics"))
            task = asyncio.ensure_future(answers(server, prompts, extras, RESTART_TOKENS))
            deadline = time.monotonic() + 600
            while committed(await client.get("/metrics")) - before < 2 * len(prompts):
                assert time.monotonic() < deadline and not task.done(), "the requests did not run"
                await asyncio.sleep(0.01)
            os.kill(pid, signal.SIGKILL)
            await marked_down(client, victim)
            return await task

    got = asyncio.run(run())
    next_token = next_token_for(server)
    for prompt, extra, tokens in zip(prompts, extras, got, strict=True):
        assert tokens == reference(next_token, prompt, extra["decision_key"], RESTART_TOKENS, prob=0.3)
    after = server.state()
    assert next(w["pid"] for w in after["workers"] if w["model"] == victim) != pid
    with server.client() as client:
        metrics = client.get("/metrics").text
    assert 'tokenrouter_model_restarts_total{model="small"} 1.0' in metrics
    resumed = sum(metric_values(metrics, "tokenrouter_requests_resumed_total").values())
    assert resumed >= 1  # some request was in flight at the kill and went through the restart


def committed(response: httpx.Response) -> float:
    return sum(metric_values(response.text, "tokenrouter_tokens_total").values())
