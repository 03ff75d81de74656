"""ASGI guards in front of the API: an optional API key (401) and a request-body size limit (413).

They answer before the application sees the request, so an oversized or unauthenticated body is never parsed.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trserve.frontend.sse import keep_server_send


async def _send_error(send: Send, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _is_authorized(scope: Scope, api_key: str) -> bool:
    given = _header(scope, b"authorization") or ""
    given = given[7:].strip() if given.lower().startswith("bearer ") else _header(scope, b"x-api-key") or ""
    return hmac.compare_digest(given.encode(), api_key.encode())


def guard(app: ASGIApp, *, max_body_bytes: int, api_key: str | None, open_paths: tuple[str, ...] = ()) -> ASGIApp:
    """Wrap ``app``: requests to paths outside ``open_paths`` need ``api_key`` (when set); bodies over
    ``max_body_bytes`` get 413 whether or not they announce their length."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        keep_server_send(scope, send)
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if api_key and scope.get("path") not in open_paths and not _is_authorized(scope, api_key):
            await _send_error(
                send, 401, "missing or invalid API key", "authentication_error", {"WWW-Authenticate": "Bearer"}
            )
            return
        declared = _header(scope, b"content-length")
        too_big = f"request body exceeds the limit of {max_body_bytes} bytes"
        if declared is not None and declared.isdecimal() and int(declared) > max_body_bytes:
            await _send_error(send, 413, too_big, "request_too_large")
            return
        body, more_messages = await _read_body(receive, max_body_bytes)
        if body is None:
            await _send_error(send, 413, too_big, "request_too_large")
            return
        await app(scope, _replay(body, more_messages, receive), send)

    return guarded


async def _read_body(receive: Receive, limit: int) -> tuple[bytes | None, list[Message]]:
    """The whole body, or None once it passes ``limit``; a disconnect ends reading early (and is replayed)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), [message]
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None, []
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), []


def _replay(body: bytes, pending: list[Message], receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
