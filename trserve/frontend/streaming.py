"""Consuming one generation's events for the HTTP layer: text deltas, stop strings, failures, client
disconnects (the request is aborted on every model when the client goes or a stop string ends it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request

from trserve.frontend.book import FrontEnd
from trserve.frontend.generation import Failure, Generation
from trserve.frontend.text import TextStream

#: The OpenAI error ``type`` of each status a failed generation answers.
ERROR_KINDS = {500: "internal_error", 503: "service_unavailable", 504: "timeout"}


class GenerationFailed(Exception):
    """The request could not finish: ``status`` 503 (a model process died or failed), 504 (it stalled) or 500 (the
    front end could not handle a report about it)."""

    def __init__(self, failure: Failure | str) -> None:
        super().__init__(str(failure))
        self.status = failure.status if isinstance(failure, Failure) else 503
        #: The OpenAI error ``type`` that goes with the status.
        self.kind = ERROR_KINDS.get(self.status, "error")


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def events_with_text(
    frontend: FrontEnd, gen: Generation, text: TextStream, first: tuple[str, Any] | None = None
) -> AsyncIterator[tuple[str, str | None]]:
    """Yield ``(text_delta, finish_reason)``; the reason is set on the last item. A stop string ends the request
    early (and aborts it on every model)."""
    event = first if first is not None else await gen.events.get()
    while True:
        kind, value = event
        if kind == "tokens":
            delta = text.push(value)
            if text.is_stopped:
                frontend.abort(gen.request_id, reason="stop")
                yield delta, "stop"
                return
            if delta:
                yield delta, None
        elif kind == "done":
            yield text.finish(), value
            return
        else:
            raise GenerationFailed(value)
        event = await gen.events.get()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(frontend: FrontEnd, gen: Generation, request: Request, work: Any) -> Any:
    """Await ``work``; if the client disconnects first, abort the request everywhere and raise ClientGone."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    frontend.abort(gen.request_id)
    raise ClientGone()


async def collect(frontend: FrontEnd, gen: Generation, text: TextStream, request: Request) -> tuple[list[str], str]:
    """The whole answer of a non-streaming request: text pieces and finish reason."""

    async def run() -> tuple[list[str], str]:
        pieces: list[str] = []
        reason = "length"
        async for delta, why in events_with_text(frontend, gen, text):
            pieces.append(delta)
            reason = why or reason
        return pieces, reason

    try:
        result: tuple[list[str], str] = await _unless_disconnected(frontend, gen, request, run())
    except asyncio.CancelledError:
        frontend.abort(gen.request_id)
        raise
    return result


async def first_event(frontend: FrontEnd, gen: Generation, request: Request) -> tuple[str, Any]:
    """Wait for a streaming request's first event, so a failure before any token is still an HTTP error."""
    try:
        event: tuple[str, Any] = await _unless_disconnected(frontend, gen, request, gen.events.get())
    except asyncio.CancelledError:
        frontend.abort(gen.request_id)
        raise
    if event[0] == "error":
        raise GenerationFailed(event[1])
    return event
