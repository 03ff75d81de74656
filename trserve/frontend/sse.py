"""A lean ASGI response for server-sent event streams: one write per chunk, straight to the server.

Starlette's ``StreamingResponse`` (ASGI spec < 2.4, as uvicorn announces) runs every stream in an anyio task group
beside a disconnect listener, and each chunk passes through the framework's send wrappers (ServerErrorMiddleware,
ExceptionMiddleware). At GPU speed a stream writes a chunk per token, so that path is a large part of the front
end's CPU. :class:`EventStream` sends the response start through the wrapped ``send`` (the middlewares still see
that the response started, so a later error is not answered as a second response) and the chunks through the
server's own ``send``, which :func:`keep_server_send` (the outermost ASGI layer) puts in the scope. A disconnect
watcher cancels the stream when the client goes, as the task group did: the chunks' generator is then closed
(its ``finally`` aborts the request everywhere).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

#: Where the server's own ``send`` is kept in the scope (set by :func:`keep_server_send`).
SERVER_SEND = "tokenrouter.server_send"


def keep_server_send(scope: Scope, send: Send) -> None:
    """Remember the server's ``send`` for :class:`EventStream` (call in the outermost ASGI layer)."""
    scope[SERVER_SEND] = send


class EventStream(Response):
    """``text/event-stream`` from an async generator of ready-to-write chunks (bytes)."""

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        write = scope.get(SERVER_SEND, send)
        task = asyncio.current_task()
        assert task is not None
        streaming = True

        def on_disconnect(watcher: asyncio.Future[None]) -> None:
            if streaming and not watcher.cancelled():
                task.cancel()

        watcher = asyncio.ensure_future(_disconnected(receive))
        watcher.add_done_callback(on_disconnect)
        try:
            async for chunk in self.chunks:
                await write({"type": "http.response.body", "body": chunk, "more_body": True})
            streaming = False
            await write({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not (watcher.done() and not watcher.cancelled()):
                raise  # cancelled from outside (shutdown), not by the client going
            task.uncancel()
        finally:
            streaming = False
            watcher.cancel()
            await self.chunks.aclose()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
