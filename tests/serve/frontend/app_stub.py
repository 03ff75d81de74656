"""A stand-in for :class:`trserve.frontend.app.ServerContext` with just what ``create_app`` and a request's checks
read before anything reaches a model: for tests of the HTTP layer alone, with no front end or engines."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class StubContext:
    """No API key, no front end; ``max_body_bytes`` and ``tokenizer`` as the test needs them."""

    api_key = None
    frontend: Any = None
    started = 0.0
    model_name = "tokenrouter"

    def __init__(self, max_body_bytes: int = 1 << 16, tokenizer: Any = None) -> None:
        self.config = SimpleNamespace(server=SimpleNamespace(max_body_bytes=max_body_bytes))
        self.tokenizer = tokenizer
