"""Replicas through the whole server (``tokenrouter serve``, emulated engines, two replicas of each model): the
answers equal the single-sequence hash reference that a run with one replica of each model also serves
(``test_emulated_server``), every replica steps under load, each request's visits keep to its pinned replicas
(a hand-off or release to another replica would stall the request or leave it resident), and killing one
replica mid-load costs latency, not answers (only the requests pinned to it pause)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import running_server
from trserve.bench.client import metric_values
from trserve.engine.hash import hash_next

pytestmark = pytest.mark.serve

PROMPTS = [[300 + 11 * k + i for i in range(4 + k % 5)] for k in range(24)]
MAX_TOKENS = 40
PROB = 0.3
PROCESSES = ("small-r0", "small-r1", "large-r0", "large-r1")
MAX_NUM_SEQS = 8


def replica_config() -> dict:
    models = [{"name": name, "emulated": {"latency_ms": ms}, "max_num_seqs": MAX_NUM_SEQS, "replicas": 2}
              for name, ms in (("small", 2.0), ("large", 4.0))]  # fmt: skip
    return {
        "mode": "routed",
        "backend": "emulated",
        "models": models,
        "router": {"program": "schedule", "params": {"handoff_prob": 0.0, "seed": 0}},
        "batching": {"thresholds": [1, 2], "max_wait_ms": 10.0},
        # max_active_requests left out: max_num_seqs x replicas, 16 (each replica holds at most its 8)
        "server": {"stall_timeout_s": 30.0, "restart": {"enabled": True, "max_restarts": 1}},
    }


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("replicas") / "serve.yaml"
    path.write_text(yaml.safe_dump(replica_config()))
    with running_server(path, timeout_s=300) as process:
        yield process.url


async def ask(url: str, kill_after_tokens: int | None = None, peaks: dict | None = None) -> list[list[int]]:
    """Every prompt at once (16 active, the rest wait); with ``kill_after_tokens``, SIGKILL small-r1 once that
    many tokens were committed; with ``peaks``, record the most active requests and the most resident on each
    process seen in ``/debug/state`` meanwhile."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(k: int) -> list[int]:
            body = {"model": "tokenrouter", "prompt": PROMPTS[k], "max_tokens": MAX_TOKENS, "temperature": 0,
                    "ignore_eos": True, "return_token_ids": True,
                    "routing_extra": {"handoff_prob": PROB, "decision_key": f"k{k}"}}  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return list(response.json()["choices"][0]["token_ids"])

        tasks = [asyncio.ensure_future(one(k)) for k in range(len(PROMPTS))]
        while peaks is not None and not all(t.done() for t in tasks):
            state = (await client.get("/debug/state")).json()
            peaks["active"] = max(peaks.get("active", 0), state["active"])
            for w in state["workers"]:
                key = (w["model"], w["replica"])
                peaks[key] = max(peaks.get(key, 0), w["num_resident"])
            await asyncio.sleep(0.01)
        if kill_after_tokens is not None:
            before = sum(metric_values((await client.get("/metrics")).text, "tokenrouter_tokens_total").values())
            while sum(metric_values((await client.get("/metrics")).text, "tokenrouter_tokens_total").values()) < (
                before + kill_after_tokens
            ):
                await asyncio.sleep(0.02)
            state = (await client.get("/debug/state")).json()
            os.kill(next(w["pid"] for w in state["workers"] if (w["model"], w["replica"]) == (0, 1)), signal.SIGKILL)
        return list(await asyncio.gather(*tasks))


def expected(k: int) -> list[int]:
    return reference(lambda m, seq: hash_next(m, seq).token_id, PROMPTS[k], f"k{k}", MAX_TOKENS, prob=PROB)


def idle_state(url: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        state = httpx.get(url + "/debug/state").json()
        done = state["in_flight"] == 0 and all(w["num_resident"] == 0 for w in state["workers"])
        if done or time.monotonic() > deadline:
            return state


def test_replicas_serve_the_reference_answers_and_every_replica_steps(url: str):
    peaks: dict = {}
    answers = asyncio.run(ask(url, peaks=peaks))
    assert answers == [expected(k) for k in range(len(PROMPTS))]
    # The default admission limit is both replicas' max_num_seqs, and no replica held more than its own.
    assert peaks.pop("active") == 2 * MAX_NUM_SEQS
    assert 0 < max(peaks.values()) <= MAX_NUM_SEQS, peaks
    text = httpx.get(url + "/metrics").text
    steps = metric_values(text, "tokenrouter_steps_total")
    assert set(steps) == set(PROCESSES) and min(steps.values()) > 0, steps
    assert sum(metric_values(text, "tokenrouter_handoffs_total").values()) > len(PROMPTS)
    # Releases reached the pinned replicas: nothing is left resident, no KV held anywhere.
    state = idle_state(url)
    assert [(w["model"], w["replica"]) for w in state["workers"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(w["num_resident"], w["kv_usage"]) for w in state["workers"]] == [(0, 0.0)] * 4


def test_a_killed_replica_restarts_and_the_answers_stay_the_same(url: str):
    answers = asyncio.run(ask(url, kill_after_tokens=200))
    assert answers == [expected(k) for k in range(len(PROMPTS))]
    text = httpx.get(url + "/metrics").text
    assert metric_values(text, "tokenrouter_model_restarts_total") == {"small-r1": 1.0}
    # Only the requests pinned to the dead replica were suspended and resumed (about half of the 16 in flight);
    # the others went on.
    assert 0 < metric_values(text, "tokenrouter_requests_resumed_total")[""] <= 12
    assert [w["num_resident"] for w in idle_state(url)["workers"]] == [0] * 4
