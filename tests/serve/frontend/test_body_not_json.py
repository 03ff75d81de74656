"""A body FastAPI does not read as JSON gets a 400 that says why: curl's ``-d`` without ``-H 'Content-Type:
application/json'`` sends form data, whose (good) JSON pydantic called "not a valid dictionary"; an empty body was
"body: Field required"."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.serve.frontend.app_stub import StubContext
from trserve.frontend.app import create_app

BODY = b'{"model": "tokenrouter", "prompt": "hi", "max_tokens": 2}'


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain"])
def test_json_sent_as_another_content_type_is_told_so(path: str, content_type: str) -> None:
    # these requests never get past the body's validation
    client = TestClient(create_app(StubContext()))  # type: ignore[arg-type]
    response = client.post(path, content=BODY, headers={"content-type": content_type})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "Content-Type: application/json" in message and content_type in message


@pytest.mark.parametrize("body", [b"", b"null"])
def test_an_empty_body_is_told_so(body: bytes) -> None:
    client = TestClient(create_app(StubContext()))  # type: ignore[arg-type]
    response = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and "body is empty" in response.json()["error"]["message"]
