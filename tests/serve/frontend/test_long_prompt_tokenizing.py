"""A long prompt is tokenized beside the event loop, not on it: a 1 MB prompt (the default body limit) takes about
a second to encode, and on the loop it stalled every stream the server was writing (each chunk waited ~0.4-1 s
per such request on the local pair's tokenizer). Short prompts stay inline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.serve.frontend.app_stub import StubContext
from trserve.frontend.app import LONG_TEXT_CHARS, create_app


class RecordingTokenizer:
    """Records whether each encode ran on the event loop's thread, then refuses the text (a 400: the request ends
    there, so no front end is needed)."""

    def __init__(self) -> None:
        self.on_loop: list[bool] = []

    def _record(self) -> list[int]:
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        raise ValueError("refused by the test")

    def encode(self, prompt: str) -> list[int]:
        return self._record()

    def encode_chat(self, messages: Any) -> list[int]:
        return self._record()


@pytest.mark.parametrize("chat", [False, True])
def test_long_text_is_tokenized_off_the_event_loop_and_short_text_on_it(chat: bool) -> None:
    ctx = StubContext(max_body_bytes=1 << 22, tokenizer=RecordingTokenizer())
    client = TestClient(create_app(ctx))  # type: ignore[arg-type]
    for text in ("hi", "x" * (LONG_TEXT_CHARS + 1)):
        if chat:
            body = {"model": "tokenrouter", "messages": [{"role": "user", "content": text}]}
            response = client.post("/v1/chat/completions", json=body)
        else:
            response = client.post("/v1/completions", json={"model": "tokenrouter", "prompt": text})
        assert response.status_code == 400 and "refused by the test" in response.json()["error"]["message"]
    assert ctx.tokenizer.on_loop == [True, False]
