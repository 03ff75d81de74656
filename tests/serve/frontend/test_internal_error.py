"""A bug in a route answers OpenAI's JSON error body with status 500, as every other error (docs/serving.md's
table), not Starlette's plain-text "Internal Server Error"; the exception still reaches the server's log."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from starlette.testclient import TestClient

from trserve.frontend.app import create_app


class BrokenContext:
    """Just what ``create_app`` reads, with a served model name that raises (a stand-in for any bug)."""

    config = SimpleNamespace(server=SimpleNamespace(max_body_bytes=1 << 16))
    api_key = None
    frontend: Any = None
    started = 0.0

    @property
    def model_name(self) -> str:
        raise RuntimeError("a bug")


def test_a_bug_is_a_json_500() -> None:
    client = TestClient(create_app(BrokenContext()), raise_server_exceptions=False)  # type: ignore[arg-type]
    response = client.get("/v1/models")
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "internal_error"
    assert "RuntimeError" in response.json()["error"]["message"]
