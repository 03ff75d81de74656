"""``server.stream_interval``: a stream's chunks carry at least that many tokens each (but the first, sent as soon
as it has text, and the last), and say exactly what the whole answer says."""

from __future__ import annotations

import json

import pytest

from tests.serve.server_fixtures import MODEL, Served
from trserve.config import ServeConfig

pytestmark = pytest.mark.serve

INTERVAL = 4  # the tcp_hash_server fixture's server.stream_interval
MAX_TOKENS = 21


def request(**extra: object) -> dict:
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_provenance": True, **extra}  # fmt: skip


def test_chunks_hold_interval_tokens_and_add_up_to_the_answer(tcp_hash_server: Served):
    with tcp_hash_server.client() as client:
        whole = client.post("/v1/completions", json=request()).json()["choices"][0]
        chunks = []
        with client.stream("POST", "/v1/completions", json=request(stream=True)) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line.removeprefix("data: "))["choices"][0])
    sizes = [len(c["provenance"]) for c in chunks]
    # the first token, then chunks of INTERVAL, then the finish reason (its chunk may carry no token)
    assert sum(sizes) == MAX_TOKENS and len(chunks) <= 2 + -(-(MAX_TOKENS - 1) // INTERVAL), sizes
    assert all(size >= INTERVAL for size in sizes[1:-1]), sizes
    assert "".join(c["text"] for c in chunks) == whole["text"]
    assert [c["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    assert [name for c in chunks for name in c["provenance"]] == whole["provenance"]


def test_stream_interval_is_validated():
    with pytest.raises(ValueError, match="stream_interval"):
        ServeConfig.model_validate({"models": [{"name": "m", "path": "x"}], "server": {"stream_interval": 0}})
