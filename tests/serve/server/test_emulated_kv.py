"""Emulated engines with block pools far smaller than the requests need, through the whole server: under each
spill policy (and in the ``lockstep`` baseline, whose driver keeps the same accounting) every request gets the
hash reference loop's tokens (a wrong recompute would be a wrong token), the core did give KV up where the
policy allows it, and the pools are empty afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import running_server
from trserve.engine.hash import hash_next

pytestmark = pytest.mark.serve

PROMPTS = [[300 + 11 * k + i for i in range(6 + k)] for k in range(12)]  # 6..17 tokens
MAX_TOKENS = 24  # 30..41 tokens each: 2..3 blocks of 16, about 30 blocks in all against pools of 8 and 10
POOL_TOKENS = {"large": 128, "small": 160}


def tight_config(policy: str, mode: str = "routed") -> dict:
    models = [
        {"name": name, "block_size": 16, "max_num_seqs": 16, "emulated": {"latency_ms": 1.0, "kv_tokens": tokens}}
        for name, tokens in POOL_TOKENS.items()
    ]
    return {
        "mode": mode,
        "backend": "emulated",
        "models": models,
        "router": {"program": "schedule", "params": {"handoff_prob": 0.0, "seed": 0}},
        "batching": {"thresholds": [1, 1], "max_wait_ms": 20.0},
        "server": {"max_active_requests": 16},
        "memory": {"policy": policy},
    }


@pytest.fixture(scope="module", params=["cost", "lru", "admission-limit", "lockstep/cost"])
def tight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    mode, _, policy = request.param.rpartition("/")
    path = tmp_path_factory.mktemp("emulated-kv") / "serve.yaml"
    path.write_text(yaml.safe_dump(tight_config(policy, mode or "routed")))
    with running_server(path, timeout_s=300) as process:
        yield request.param, process.url


def kv_metrics(url: str) -> dict[tuple[str, str], float]:
    """``/metrics``' KV blocks and events as ``{(model, kind or event): value}``."""
    text = httpx.get(url + "/metrics").text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("tokenrouter_kv_blocks", "tokenrouter_kv_events_total"):
                labels = sample.labels
                found[labels["model"], labels.get("kind") or labels["event"]] = sample.value
    return found


async def ask(url: str) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(k: int) -> dict:
            body = {"model": "tokenrouter", "prompt": PROMPTS[k], "max_tokens": MAX_TOKENS, "temperature": 0,
                    "ignore_eos": True, "return_token_ids": True,
                    "routing_extra": {"handoff_prob": 0.3, "decision_key": f"kv{k}"}}  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        return await asyncio.gather(*(one(k) for k in range(len(PROMPTS))))


def test_tight_pools_serve_the_reference_tokens_and_free_everything(tight: tuple[str, str]):
    policy, url = tight
    answers = asyncio.run(ask(url))
    for k, answer in enumerate(answers):
        expected = reference(lambda m, seq: hash_next(m, seq).token_id, PROMPTS[k], f"kv{k}", MAX_TOKENS, prob=0.3)
        assert answer["choices"][0]["token_ids"] == expected, (policy, k)
    metrics = kv_metrics(url)
    assert metrics["large", "total"] == 8 and metrics["small", "total"] == 10, metrics
    state = httpx.get(url + "/debug/state").json()
    if policy.startswith("lockstep/"):  # one driver holds both models' accounting: its reports are the record
        assert all(w["num_resident"] == 0 for w in state["workers"]), state["workers"]  # the engines' pools
        assert metrics["large", "spilled"] + metrics["large", "preempted"] > 0, metrics
        fresh = kv_metrics(url)  # the driver's probe answer carries its models' accounting: blocks read free
        assert [fresh[m, kind] for m in ("small", "large") for kind in ("used", "parked")] == [0, 0, 0, 0], fresh
        return
    memory = [w["memory"] for w in state["workers"]]
    assert [m["blocks_total"] for m in memory] == [8, 10]
    assert all(m["blocks_used"] == 0 for m in memory)
    fresh = kv_metrics(url)  # /metrics reads the workers' state too: blocks freed without a step show there
    assert [fresh[m, kind] for m in ("small", "large") for kind in ("used", "parked")] == [0, 0, 0, 0], fresh
    given_up = sum(m["spilled"] + m["preempted"] for m in memory)
    if policy == "admission-limit":
        assert given_up == 0 and sum(m["admission_waits"] for m in memory) > 0
    else:
        assert given_up > 0


def test_a_request_larger_than_the_smallest_cache_is_refused_naming_the_limit(tight: tuple[str, str]):
    _, url = tight
    body = {"model": "tokenrouter", "prompt": PROMPTS[0], "max_tokens": 200, "temperature": 0}  # 206 > 128 tokens
    response = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "max_tokens" and "KV cache of 128 tokens" in error["message"], error
