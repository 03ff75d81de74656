"""Admission: a request whose fields do not fit every served model gets 400 naming the field and never reaches
an engine; OpenAI fields the server does not implement are refused, never ignored.

The batch test runs on the hash stand-in and on real vLLM engines (where a bad token id used to fail the whole
batch); the field tables run on the hash stand-in, since admission does not depend on the engine.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import MAX_MODEL_LEN, MODEL, Served, wait_idle
from trserve.engine.hash import hash_next

pytestmark = pytest.mark.serve

VOCAB = 49152  # the local pair's config.json vocab_size
ORDINARY = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}


@pytest.fixture(params=["hash", "vllm"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


def test_a_bad_token_id_fails_its_request_alone(server: Served):
    async def together() -> list[httpx.Response]:
        bad = {**ORDINARY, "prompt": [1, 2, 1_000_000_000, 5]}
        bodies = [ORDINARY] * 3 + [bad] + [ORDINARY] * 3
        async with server.async_client() as c:
            return await asyncio.gather(*(c.post("/v1/completions", json=b) for b in bodies))

    responses = asyncio.run(together())
    codes = [r.status_code for r in responses]
    assert codes == [200] * 3 + [400] + [200] * 3, [r.text for r in responses]
    error = responses[3].json()["error"]
    assert error["param"] == "prompt" and "1000000000" in error["message"] and "vocabulary" in error["message"]
    answers = {r.json()["choices"][0]["text"] for r in responses if r.status_code == 200}
    assert len(answers) == 1 and next(iter(answers)).strip()  # six identical greedy answers
    wait_idle(server)


REFUSED = [
    ("n", 2), ("best_of", 3), ("echo", True), ("suffix", "the end"), ("logprobs", 2), ("presence_penalty", 0.5),
    ("frequency_penalty", 0.5), ("repetition_penalty", 1.2), ("min_p", 0.1), ("no_such_field", 1),
]  # fmt: skip
REFUSED_CHAT = [
    ("logprobs", True), ("top_logprobs", 3), ("response_format", {"type": "json_object"}),
    ("tools", [{"type": "function", "function": {"name": "f"}}]), ("tool_choice", "auto"), ("n", 2),
    ("parallel_tool_calls", True), ("service_tier", "flex"), ("store", True), ("reasoning_effort", "low"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value"), REFUSED)
def test_unimplemented_completion_fields_are_refused_by_name(hash_server: Served, field, value):
    with hash_server.client() as c:
        refused = c.post("/v1/completions", json={**ORDINARY, field: value})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == field and field in refused.json()["error"]["message"]


@pytest.mark.parametrize(("field", "value"), REFUSED_CHAT)
def test_unimplemented_chat_fields_are_refused_by_name(hash_server: Served, field, value):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, field: value}
    with hash_server.client() as c:
        refused = c.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == field


BAD_FIELDS = [
    ({"stop_token_ids": [VOCAB]}, "stop_token_ids", "vocabulary"),
    ({"stop_token_ids": [-1]}, "stop_token_ids.0", "greater than or equal"),
    ({"stop_token_ids": list(range(65))}, "stop_token_ids", "at most 64"),
    ({"logit_bias": {str(VOCAB + 5): 1.0}}, "logit_bias", "vocabulary"),
    ({"logit_bias": {"hello": 1.0}}, "logit_bias", "token ids"),
    ({"logit_bias": {"5": 101}}, "logit_bias.5", "less than or equal"),
    ({"seed": 1 << 63}, "seed", "less than or equal"),
    ({"seed": -1}, "seed", "greater than or equal to 0"),
    ({"stop": ["x"] * 17}, "stop", "at most 16"),
    ({"stop": "y" * 257}, "stop", "at most 256"),
    ({"routing_extra": {"k": "v" * 5000}}, "routing_extra", "4096 bytes"),
    ({"routing_extra": {str(k): k for k in range(33)}}, "routing_extra", "32 keys"),
    ({"routing_extra": {"trserve_incarnation": 3}}, "routing_extra", "server's own key"),
    ({"routing_extra": {"trserve_resume_model": 1}}, "routing_extra", "server's own key"),
    ({"prompt": ""}, "prompt", "tokenizes to no tokens"),
    ({"prompt": [5] * (MAX_MODEL_LEN - 3), "max_tokens": 4}, "max_tokens", "context limit"),
    ({"min_tokens": 9}, "min_tokens", "exceeds max_tokens"),
    ({"top_k": -2}, "top_k", "greater than or equal"),
    ({"top_k": VOCAB + 1}, "top_k", "vocabulary size"),
    ({"routing_extra": {"schedule": [[2, True]]}}, "routing_extra", "destination must be in 0..1"),
    ({"routing_extra": {"handof_prob": 0.5}}, "routing_extra", "routing_extra.handof_prob: routing program"),
    ({"stream": True, "stream_options": {"include_usage": True, "foo": 1}}, "stream_options.foo", "not a field"),
    ({"stream": True, "return_token_ids": True}, "return_token_ids", "without stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed with stream: true"),
]


@pytest.mark.parametrize(("fields", "param", "words"), BAD_FIELDS)
def test_fields_that_do_not_fit_get_400_naming_them(hash_server: Served, fields, param, words):
    with hash_server.client() as c:
        refused = c.post("/v1/completions", json={**ORDINARY, **fields})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["param"] == param and words in error["message"], error
        assert c.post("/v1/completions", json=ORDINARY).status_code == 200
    assert wait_idle(hash_server)["in_flight"] == 0


#: Valid JSON that the tokenizer, the wire between the processes (msgpack) or int() cannot take.
UNTAKEABLE = [
    ({"prompt": "a\ud800b"}, "prompt"),  # a lone surrogate: JSON allows it, no tokenizer encodes it
    ({"prompt": ["a\ud800b"]}, "prompt"),
    ({"routing_extra": {"k": ["v", "\udfff"]}}, "routing_extra"),
    ({"routing_extra": {"k": 10**20}}, "routing_extra"),  # msgpack integers are 64-bit
    ({"logit_bias": {"\u00b2": 1.0}}, "logit_bias"),  # "²".isdigit(), but no int
]


def test_json_the_models_cannot_take_gets_400_and_holds_no_slot(hash_server: Served):
    """These used to answer 500; the routing_extra ones after taking a slot for good (64 wedged the server)."""
    with hash_server.client() as c:
        for fields, param in UNTAKEABLE:
            content = json.dumps({**ORDINARY, **fields})  # ASCII: a lone surrogate travels as its escape
            refused = c.post("/v1/completions", content=content, headers={"content-type": "application/json"})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text
        assert c.post("/v1/completions", json=ORDINARY).status_code == 200
    state = wait_idle(hash_server)
    assert state["active"] == 0 and state["in_flight"] == 0, state


def test_chat_messages_with_unsupported_parts_are_refused(hash_server: Served):
    bodies = [
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "messages.0.content"),
        ({"role": "user", "content": "hi", "name": "bob"}, "messages.0.name"),
        ({"role": "assistant", "content": None}, "messages.0.content"),
        ({"role": "user", "content": "hi", "tool_calls": []}, "messages.0.tool_calls"),
    ]
    with hash_server.client() as c:
        for message, param in bodies:
            refused = c.post("/v1/chat/completions", json={"model": MODEL, "messages": [message], "max_tokens": 4})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text


def test_routine_client_fields_are_accepted(hash_server: Served):
    routine = {"user": "u-1", "metadata": {"team": "x"}, "n": 1, "echo": False, "best_of": 1, "presence_penalty": 0}
    body = {**ORDINARY, **routine, "logprobs": None, "stream": True, "stream_options": {"include_usage": True}}
    with hash_server.client() as c, c.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    assert '"usage"' in lines[-1] and '"completion_tokens":8' in lines[-1]


def _repeat_case(max_tokens: int, min_tokens: int, key: str) -> tuple[list[int], list[int], int]:
    """A prompt whose hash-engine output (under the schedule program's keyed hand-offs) has, first at the last
    place ``min_tokens`` forbids a stop (output token ``min_tokens``), a token that occurs again after it:
    (prompt, output, that token). Found by search: with ~10k token ids a repeat is rare, so the boundary case is
    built, not hoped for."""
    for i in range(20000):
        prompt = [400 + 13 * i + k for k in range(6)]
        ids = reference(lambda m, seq: hash_next(m, seq).token_id, prompt, key, max_tokens, prob=0.5)
        token = ids[min_tokens - 1]
        # First there, and again later but not as the last token (that one ends the request by max_tokens).
        if token not in ids[: min_tokens - 1] and token in ids[min_tokens:-1]:
            return prompt, ids, token
    raise AssertionError("no prompt with a repeated token")


def test_min_tokens_and_stop_token_ids_end_requests_in_the_core(hash_server: Served):
    """The hash engine ignores sampling, so a stop token may come early: the core must not stop before
    min_tokens, then stop at the first stop token after it, on every model the request visits."""
    key, min_tokens = "admission-min-tokens", 5
    prompt, ids, stop = _repeat_case(24, min_tokens, key)
    early = ids.index(stop)
    late = ids.index(stop, min_tokens)
    assert early == min_tokens - 1 and min_tokens <= late < len(ids) - 1  # a stop one token too early, then one after
    with hash_server.client() as c:
        base = {**ORDINARY, "prompt": prompt, "max_tokens": 24, "return_token_ids": True,
                "routing_extra": {"handoff_prob": 0.5, "decision_key": key}}  # fmt: skip
        whole = c.post("/v1/completions", json=base).json()["choices"][0]
        assert whole["token_ids"] == ids  # the server writes the reference's tokens
        cut = c.post("/v1/completions", json={**base, "stop_token_ids": [stop]}).json()["choices"][0]
        assert cut["token_ids"] == ids[: early + 1] and cut["finish_reason"] == "stop"
        body = {**base, "stop_token_ids": [stop], "min_tokens": min_tokens}
        after = c.post("/v1/completions", json=body).json()["choices"][0]
        assert after["token_ids"] == ids[: late + 1] and after["finish_reason"] == "stop"
    wait_idle(hash_server)
