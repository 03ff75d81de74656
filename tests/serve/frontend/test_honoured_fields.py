"""Per-request sampling fields are honoured on real vLLM engines, on every model a routed request visits.

Every request here is routed by the ``schedule`` program with hand-off probability 0.5 under a fixed decision key,
so the reference (greedy) run and the run with the field take the same path through both models; a setting that
reached only the entry model would show.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.serve.server_fixtures import MODEL, Served, wait_idle

pytestmark = pytest.mark.serve

ROUTED = {"handoff_prob": 0.5, "decision_key": "honoured-fields"}
BASE = {"model": MODEL, "prompt": "The three largest cities of Europe are", "max_tokens": 16, "temperature": 0,
        "return_token_ids": True, "ignore_eos": True, "routing_extra": ROUTED}  # fmt: skip


def complete(server: Served, **fields: Any) -> dict[str, Any]:
    with server.client() as c:
        response = c.post("/v1/completions", json={**BASE, **fields})
    assert response.status_code == 200, response.text
    choice: dict[str, Any] = response.json()["choices"][0]
    return choice


@pytest.fixture(scope="module")
def greedy(vllm_server: Served) -> list[int]:
    ids: list[int] = complete(vllm_server)["token_ids"]
    assert len(ids) == 16 and len(set(ids)) > 3  # a real answer, not one repeated token
    return ids


def test_top_k_1_samples_the_greedy_tokens(vllm_server: Served, greedy: list[int]):
    sampled = complete(vllm_server, temperature=1.0, seed=3)["token_ids"]
    assert sampled != greedy  # sampling at temperature 1 does move this answer...
    assert complete(vllm_server, temperature=1.0, seed=3, top_k=1)["token_ids"] == greedy  # ...top_k=1 does not


def test_logit_bias_reaches_every_model(vllm_server: Served, greedy: list[int]):
    pushed = 1000  # an ordinary token id the answer does not use
    assert pushed not in greedy
    assert complete(vllm_server, logit_bias={str(pushed): 100})["token_ids"] == [pushed] * 16
    banned = complete(vllm_server, logit_bias={str(greedy[0]): -100})["token_ids"]
    assert banned[0] != greedy[0]


def test_stop_token_ids_end_the_request(vllm_server: Served, greedy: list[int]):
    stop = greedy[3]
    cut = complete(vllm_server, stop_token_ids=[stop])
    assert cut["token_ids"] == greedy[: greedy.index(stop) + 1] and cut["finish_reason"] == "stop"


def test_min_tokens_keeps_stop_tokens_from_being_sampled_early(vllm_server: Served, greedy: list[int]):
    stop = greedy[2]
    first = greedy.index(stop)
    out = complete(vllm_server, stop_token_ids=[stop], min_tokens=first + 4)
    ids = out["token_ids"]
    assert ids[:first] == greedy[:first]  # identical until the stop token would have come
    assert stop not in ids[: first + 4]  # suppressed while fewer than min_tokens tokens exist, on both models
    assert len(ids) >= first + 4 and (out["finish_reason"] == "length" or ids[-1] == stop)
    wait_idle(vllm_server)
