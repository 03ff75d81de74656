"""Routed answers through the whole server equal a reference loop that runs the models with the same per-token
decisions and no pending state (transformers for vLLM, the hash function for the stand-in engine)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence

import pytest
import torch

from tests.serve.engine_support import greedy_next, hf_model, sample_prompts
from tests.serve.server_fixtures import MODEL, Served
from trcore.programs.schedule import random_decision
from trserve.engine.hash import hash_next

pytestmark = pytest.mark.serve

NextToken = Callable[[int, list[int]], int]

#: (destination, kept) per step, wherever the request is; requests start on model 0 (large).
SCHEDULES = [
    [[1, True], [1, True], [1, True], [0, True], [0, True], [1, True], [1, True], [0, True]],
    [[1, True], [1, True], [0, False], [1, True], [1, True], [1, False], [0, True], [1, True]],
    [[0, False], [1, True], [1, False], [0, True], [1, True], [1, True], [0, False], [0, True]],
]


def reference(next_token: NextToken, prompt: Sequence[int], key: str, max_tokens: int, schedule=(), prob=0.0):
    """One sequence, every token recomputed from the whole of it, under the schedule program's decisions
    (random ones keyed by ``key``: the request's ``decision_key``)."""
    seq, model, index = list(prompt), 0, 0
    while True:
        token = next_token(model, seq)
        if index < len(schedule):
            dest, kept = schedule[index]
        else:
            dest, kept = random_decision(0, key, index, model, 2, prob), True
        index += 1
        if kept:
            seq.append(token)
            if len(seq) - len(prompt) == max_tokens:
                return seq[len(prompt) :]
        model = dest


@functools.cache
def _hf_next_token(dirs: tuple[str, ...]) -> NextToken:
    torch.set_num_threads(1)  # the engines are busy on every core; more threads only spin
    models = [hf_model(d) for d in dirs]

    @functools.cache
    def next_token(model: int, seq: tuple[int, ...]) -> int:
        return greedy_next(models[model], list(seq))[0]

    return lambda model, seq: next_token(model, tuple(seq))


def next_token_for(server: Served) -> NextToken:
    """Greedy next token of model ``m`` after a sequence, for the server's backend (memoized across tests)."""
    if server.backend == "hash":
        return lambda model, seq: hash_next(model, seq).token_id
    return _hf_next_token(server.model_dirs)


#: ``vllm_small_kv``: the same references with sessions spilled and requests preempted mid-request.
@pytest.fixture(params=["hash", "vllm", "vllm_small_kv"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


async def ask(server: Served, prompts, max_tokens: int, extras) -> list[dict]:
    async with server.async_client() as client:

        async def one(prompt, extra):
            body = {"model": MODEL, "prompt": list(prompt), "max_tokens": max_tokens, "temperature": 0,
                    "ignore_eos": True, "return_token_ids": True, "routing_extra": extra}  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        return await asyncio.gather(*(one(p, e) for p, e in zip(prompts, extras, strict=True)))


def test_router_that_never_leaves_model_a_gives_its_greedy_output(server: Served):
    prompts = sample_prompts()
    answers = asyncio.run(ask(server, prompts, 12, [{"handoff_prob": 0.0}] * len(prompts)))
    next_token = next_token_for(server)
    for prompt, answer in zip(prompts, answers, strict=True):
        assert answer["choices"][0]["token_ids"] == reference(next_token, prompt, answer["id"], 12)


def test_fixed_handoff_schedule_gives_the_reference_loop_tokens(server: Served):
    prompts = sample_prompts()[: len(SCHEDULES)]
    answers = asyncio.run(ask(server, prompts, 10, [{"schedule": s} for s in SCHEDULES]))
    next_token = next_token_for(server)
    for prompt, schedule, answer in zip(prompts, SCHEDULES, answers, strict=True):
        expected = reference(next_token, prompt, answer["id"], 10, schedule)
        assert answer["choices"][0]["token_ids"] == expected


def test_64_concurrent_requests_with_random_handoffs_lose_and_duplicate_nothing(server: Served):
    base = sample_prompts()
    prompts = [[*base[k % len(base)], 300 + k] for k in range(64)]
    extras = [{"handoff_prob": 0.3, "decision_key": f"k{k}"} for k in range(64)]
    answers = asyncio.run(ask(server, prompts, 12, extras))
    assert len({a["id"] for a in answers}) == 64
    assert all(len(a["choices"][0]["token_ids"]) == 12 for a in answers)
    next_token = next_token_for(server)
    checked = answers if server.backend == "hash" else answers[:16]  # transformers is slow here
    for k, (prompt, answer) in enumerate(zip(prompts, checked, strict=False)):
        expected = reference(next_token, prompt, f"k{k}", 12, prob=0.3)
        assert answer["choices"][0]["token_ids"] == expected, answer["id"]
    state = server.state()
    assert state["in_flight"] == 0
