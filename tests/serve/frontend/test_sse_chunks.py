"""The pre-encoded stream chunks say exactly what the dict-built OpenAI chunks say, for any text."""

from __future__ import annotations

import json

import pytest

from trserve.frontend.responses import Provenance, ResponseFormat

TEXTS = ["", "plain", 'quote " and \\ backslash', "line\nbreak\ttab\x00\x1f", "héllo wörld", "emoji 😀 and 中文", None]


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("with_provenance", [False, True])
@pytest.mark.parametrize("reason", [None, "stop", "length"])
def test_sse_chunk_is_the_chunk_as_one_event(chat: bool, with_provenance: bool, reason: str | None) -> None:
    fmt = ResponseFormat('model "q"', "cmpl-7", chat, 5, Provenance(("small", "large")), with_provenance)
    for text in TEXTS:
        event = fmt.sse_chunk(text, reason, [0, 1, 1])
        assert event.startswith(b"data: ") and event.endswith(b"\n\n") and event.count(b"\n") == 2
        body = json.loads(event[len(b"data: ") : -2])
        choice = body["choices"][0]
        assert choice["finish_reason"] == reason
        assert (choice["delta"]["content"] if chat else choice["text"]) == (text or "")
        assert ("provenance" in choice) == with_provenance
        assert body == fmt.chunk(text, reason, [0, 1, 1])
