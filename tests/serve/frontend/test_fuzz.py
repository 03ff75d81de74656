"""Fuzzing the HTTP API: 1,000 generated request bodies (hypothesis) against the running hash-engine server.

Bodies mix plausible values of every field with arbitrary JSON, unknown fields, wrong types, broken JSON and
both endpoints, streaming or not. Whatever comes in, the server answers with no 5xx (and no error event inside a
stream), stays healthy, and holds no request afterwards.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.server_fixtures import MAX_MODEL_LEN, MODEL, Served, wait_idle

pytestmark = pytest.mark.serve

ROUNDS, PER_ROUND = 20, 50  # 1,000 bodies, each round sent at once

#: Text includes lone surrogates: JSON can carry them ("\ud800"), no tokenizer or msgpack takes them.
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
LEAF = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
JSON = st.recursive(
    LEAF, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3), max_leaves=6
)
VOCAB = 49_152
# Small outputs keep a round short; other values must be refused (non-positive, or too long for the context).
SMALL = st.integers(1, 6)
MAX_TOKENS = SMALL | SMALL | SMALL | st.integers(max_value=0) | st.integers(min_value=MAX_MODEL_LEN + 1)
ROUTING = st.fixed_dictionaries(
    {},
    optional={
        "schedule": st.lists(st.tuples(st.integers(0, 1), st.booleans()).map(list), max_size=4),
        "handoff_prob": st.floats(0, 1),
        "decision_key": st.text(max_size=6),
    },
)
PART = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)})
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant"]),
        "content": st.text(max_size=30) | st.lists(PART, max_size=2),
    }
)

#: Honoured fields with values a client would send (mostly valid).
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.05, 1),
    "top_k": st.integers(-1, 100),
    "seed": st.integers(0, 1 << 32),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3),
    "stream": st.booleans(),
    "min_tokens": st.integers(0, 3),
    "logit_bias": st.dictionaries(st.integers(0, VOCAB - 1).map(str), st.floats(-100, 100), max_size=3),
    "stop_token_ids": st.lists(st.integers(0, VOCAB - 1), max_size=3),
    "ignore_eos": st.booleans(),
    "routing_extra": ROUTING,
    "user": st.text(max_size=8),
    "metadata": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    "n": st.just(1),
}
#: Anything at all, in every field a client could name and some it could not.
WILD: dict[str, st.SearchStrategy[Any]] = {
    **{name: strategy | JSON for name, strategy in PLAUSIBLE.items()},
    "top_k": st.integers() | JSON,
    "seed": st.integers() | JSON,
    "stop_token_ids": st.lists(st.integers(), max_size=4) | JSON,
    "logit_bias": st.dictionaries(st.integers().map(str) | st.text(max_size=4), st.floats(), max_size=4) | JSON,
    "routing_extra": st.dictionaries(
        st.sampled_from(["schedule", "handoff_prob", "decision_key", "schedule_step"]), JSON, max_size=3
    )
    | JSON,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | JSON,
    "return_token_ids": JSON,
    "logprobs": JSON,
    "echo": JSON,
    "best_of": JSON,
    "suffix": JSON,
    "tools": JSON,
    "response_format": JSON,
    "presence_penalty": JSON,
    "no_such_field": JSON,
}
PROMPT = st.text(max_size=40) | st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)
WILD_PROMPT = PROMPT | st.lists(st.integers(), max_size=6) | st.lists(st.text(max_size=10), max_size=2) | JSON
WILD_MESSAGES = st.lists(st.fixed_dictionaries({"role": JSON, "content": JSON}, optional={"name": JSON}), max_size=2)


def body(fields: dict[str, Any], required: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional={k: v for k, v in fields.items() if k not in required})


def plausible(output_field: str, prompt: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The model, the prompt and an output limit are nearly always there and right: a request without a limit
    may fill the context (see :func:`bounded`), and a wrong model would end every request at the first check."""
    required = {"model": st.sampled_from([MODEL] * 9 + ["gpt-4o"]), output_field: MAX_TOKENS | st.none(), **prompt}
    return body(PLAUSIBLE, required)


def wild(output_field: str, prompt: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    required = {"model": st.sampled_from([MODEL, "gpt-4o"]) | JSON, output_field: MAX_TOKENS | JSON, **prompt}
    return body(WILD, required)


REQUEST = st.one_of(
    st.tuples(st.just("/v1/completions"), plausible("max_tokens", {"prompt": PROMPT})),
    st.tuples(
        st.just("/v1/chat/completions"),
        plausible("max_completion_tokens", {"messages": st.lists(MESSAGE, min_size=1, max_size=3)}),
    ),
    st.tuples(st.just("/v1/completions"), wild("max_tokens", {"prompt": WILD_PROMPT})),
    st.tuples(st.just("/v1/chat/completions"), wild("max_completion_tokens", {"messages": WILD_MESSAGES})),
    st.tuples(st.sampled_from(["/v1/completions", "/v1/chat/completions"]), JSON | st.binary(max_size=30)),
)


def bounded(path: str, payload: Any) -> Any:
    """Keep a body whose output is unbounded (no limit given) from filling the whole context."""
    limit = "max_tokens" if path == "/v1/completions" else "max_completion_tokens"
    if not (isinstance(payload, dict) and limit in payload and payload[limit] is None):
        return payload
    if path == "/v1/completions":
        return {**payload, "prompt": [300] * (MAX_MODEL_LEN - 4)}
    return {**payload, "messages": [{"role": "user", "content": "word " * (MAX_MODEL_LEN - 40)}]}


async def send(c: httpx.AsyncClient, path: str, payload: Any) -> tuple[int, str]:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"content-type": "application/json"}
    async with c.stream("POST", path, content=content, headers=headers) as response:
        text = (await response.aread()).decode(errors="replace")
    return response.status_code, text


def test_fuzzed_bodies_never_get_5xx_and_leave_nothing_behind(hash_server: Served):
    seen: list[int] = []

    @settings(max_examples=ROUNDS, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(requests=st.lists(REQUEST, min_size=PER_ROUND, max_size=PER_ROUND))
    def one_round(requests: list[tuple[str, Any]]) -> None:
        async def burst() -> list[tuple[int, str]]:
            async with hash_server.async_client(timeout=60.0) as c:
                return await asyncio.gather(*(send(c, path, bounded(path, p)) for path, p in requests))

        for (path, payload), (status, text) in zip(requests, asyncio.run(burst()), strict=True):
            assert status in (200, 400, 413, 429), (path, payload, status, text)
            assert 'data: {"error"' not in text, (path, payload, text)  # no failure inside a stream either
            seen.append(status)

    one_round()
    assert len(seen) >= ROUNDS * PER_ROUND and {200, 400} <= set(seen), sorted(set(seen))
    with hash_server.client() as c:
        assert c.get("/health").status_code == 200
        assert c.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}).status_code == 200
    state = wait_idle(hash_server)
    assert state["in_flight"] == 0 and state["active"] == 0, state
    assert all(w["num_resident"] == 0 for w in state["workers"]), state
