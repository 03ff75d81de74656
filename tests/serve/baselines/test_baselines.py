"""The baselines (``lockstep``, ``per-token``) serve the same routed answers as the routed server: the tokens of
the reference loop under the same per-token decisions, on the hash stand-in engine and on real vLLM engines, and
with real KV caches smaller than the requests need (the lockstep driver keeps the core's accounting; per-token's
free-running engines queue as vLLM does)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.serve.engine_support import model_dirs, sample_prompts
from tests.serve.kv_fixtures import SMALL_KV_GIB
from tests.serve.server.test_correctness import SCHEDULES, ask, next_token_for, reference
from tests.serve.server_fixtures import Served, server_config, start_served, wait_idle

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", params=["lockstep/hash", "per-token/hash", "lockstep/vllm", "per-token/vllm"])
def baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    mode, backend = request.param.split("/")
    dirs = model_dirs()
    config = {**server_config(dirs, backend=backend), "mode": mode, "batching": {}}  # no delayed batching there
    yield from start_served(tmp_path_factory.mktemp(f"{mode}-{backend}"), config, dirs)


def test_baseline_gives_the_reference_tokens(baseline: Served):
    prompts = sample_prompts()
    extras = [{"schedule": s} for s in SCHEDULES]
    extras += [{"handoff_prob": 0.3, "decision_key": f"k{k}"} for k in range(len(SCHEDULES), 8)]
    prompts = [[*prompts[k % len(prompts)], 300 + k] for k in range(len(extras))]  # as the routed tests
    answers = asyncio.run(ask(baseline, prompts, 12, extras))
    next_token = next_token_for(baseline)
    for k, (prompt, extra, answer) in enumerate(zip(prompts, extras, answers, strict=True)):
        expected = reference(next_token, prompt, f"k{k}", 12, extra.get("schedule", ()), extra.get("handoff_prob", 0))
        assert answer["choices"][0]["token_ids"] == expected, extra
    state = wait_idle(baseline)
    assert state["in_flight"] == 0 and all(w["num_resident"] == 0 for w in state["workers"])


@pytest.fixture(scope="module", params=["lockstep", "per-token"])
def small_kv_baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    dirs = model_dirs()
    config = {**server_config(dirs), "mode": request.param, "batching": {}}
    for model, gib in zip(config["models"], SMALL_KV_GIB, strict=True):
        model["kv_cache_gib"] = gib
    yield from start_served(tmp_path_factory.mktemp(f"{request.param}-small-kv"), config, dirs)


def test_baseline_with_a_cache_smaller_than_the_requests_answers_all_as_the_reference(small_kv_baseline: Served):
    server = small_kv_baseline
    prompts = [list(range(100 + k, 100 + k + 40)) for k in range(24)]  # 40 + 24 tokens: 2 blocks of 32 each
    extras = [{"handoff_prob": 0.25, "decision_key": f"kv{k}"} for k in range(24)]  # 48 blocks against 17 and 18
    answers = asyncio.run(ask(server, prompts, 24, extras))
    next_token = next_token_for(server)
    for k in range(6):  # transformers is slow here
        expected = reference(next_token, prompts[k], f"kv{k}", 24, prob=0.25)
        assert answers[k]["choices"][0]["token_ids"] == expected, answers[k]["id"]
    assert all(len(a["choices"][0]["token_ids"]) == 24 for a in answers)
    state = wait_idle(server)
    assert state["in_flight"] == 0 and all(w["num_resident"] == 0 for w in state["workers"])
