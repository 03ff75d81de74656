"""A stop token ends the answer as vLLM's server does: counted in ``usage`` and ``token_ids`` but its text left out,
streamed or not (on the hash server), and a stop however many tokens were allowed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.serve.server_fixtures import MODEL, Served, wait_idle
from trcore import RequestSpec
from trserve.frontend.generation import Generation

pytestmark = pytest.mark.serve

BODY = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
        "routing_extra": {"handoff_prob": 0.0}}  # fmt: skip


def streamed_text(server: Served, body: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    text, reason, usage = "", None, {}
    with server.client() as c, c.stream("POST", "/v1/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                for choice in chunk["choices"]:
                    text, reason = text + choice["text"], choice["finish_reason"] or reason
                usage = chunk.get("usage") or usage
    return text, reason, usage


def test_a_stop_tokens_text_is_left_out_of_the_answer(hash_server: Served):
    with hash_server.client() as c:
        full = c.post("/v1/completions", json={**BODY, "return_token_ids": True}).json()["choices"][0]
        ids = full["token_ids"]
        k = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i])  # the first output token of its id
        stop = ids[k]
        cut = c.post("/v1/completions", json={**BODY, "stop_token_ids": [stop], "return_token_ids": True}).json()
        before = c.post("/v1/completions", json={**BODY, "max_tokens": k}).json()
        with_it = c.post("/v1/completions", json={**BODY, "max_tokens": k + 1}).json()["choices"][0]["text"]
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["token_ids"] == ids[: k + 1]
    assert cut["usage"]["completion_tokens"] == k + 1  # the stop token is counted...
    assert choice["text"] == before["choices"][0]["text"] != with_it  # ...but its text is not in the answer
    stream_body = {**BODY, "stop_token_ids": [stop], "stream": True, "stream_options": {"include_usage": True}}
    assert streamed_text(hash_server, stream_body) == (choice["text"], "stop", cut["usage"])
    wait_idle(hash_server)


def test_a_stop_token_as_the_last_token_allowed_is_a_stop_after_a_restart_too() -> None:
    # the worker's Finished says "stop" for it (runtime/reports.py), and vLLM checks stop tokens before the length;
    # a request whose end report a crash lost was finished by the front end's own check, which said "length"
    spec = RequestSpec("r", num_prompt_tokens=1, max_tokens=3, stop_token_ids=frozenset({9}))
    gen = Generation(spec, [1], {})
    gen.accept(0, (5, 6, 9))
    assert gen.finish_reason() == "stop"
    gen.output[-1] = 7
    assert gen.finish_reason() == "length"
