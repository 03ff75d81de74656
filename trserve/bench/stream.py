"""The load generator's lean streaming client: one keep-alive HTTP/1.1 connection per closed-loop client, on
asyncio streams, reading the SSE answer without parsing every chunk.

The load generator shares the machine with the server it measures, so its CPU per token is a cost the server
does not get. An httpx streaming request with a JSON parse per chunk cost about 150 us of CPU per committed token
at N = 64 (docs/benchmarks.md, "The load generator"); here a chunk costs a chunked-encoding read and two byte
searches: the first chunk with text stamps the time to first token, and only the usage chunk (the last before
``[DONE]``, asked for with ``stream_options.include_usage``) is parsed as JSON. An error event inside the stream,
a non-200 answer or a connection the server closed mid-answer raise :class:`StreamError`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol
from urllib.parse import urlsplit


class StreamError(RuntimeError):
    """The server refused or broke off a streamed request."""


class Timed(Protocol):
    """What a streamed request records (trserve.bench.client.RequestRecord); one with a ``texts`` list that is not
    None also gets the answer's text pieces (each chunk is then parsed)."""

    first: float | None
    num_tokens: int


class Connection:
    """One keep-alive connection to ``url`` (``http://host:port``), opened on first use and again after the
    server closed it."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"the load generator speaks plain http://host:port, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    def request(self, path: str, body: dict[str, Any]) -> bytes:
        """The bytes of a JSON POST to ``path`` on this connection."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n")  # fmt: skip
        return head.encode() + payload

    async def stream(self, request: bytes, rec: Timed) -> None:
        """Send ``request`` and read its SSE answer to the end, filling ``rec``'s first-token time and token
        count (from the usage chunk)."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(request)
        try:
            await self._read_answer(self._reader, rec)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            raise StreamError(f"the server closed the connection mid-answer: {exc!r}") from None

    async def _read_answer(self, reader: asyncio.StreamReader, rec: Timed) -> None:
        status = int((await reader.readuntil(b"\r\n")).split(b" ", 2)[1])
        headers = (await reader.readuntil(b"\r\n\r\n")).lower()
        if status != 200 or b"transfer-encoding: chunked" not in headers:
            length = (
                headers.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0] if b"content-length:" in headers else 0
            )
            body = await reader.readexactly(int(length))
            self.close()
            raise StreamError(f"server answered {status}: {body[:300]!r}")
        if b"connection: close" in headers:
            self._writer = None  # read this answer, open a new connection for the next
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return
            if rec.first is None and b'"choices":[{' in chunk:
                rec.first = time.perf_counter()
            texts = getattr(rec, "texts", None)
            if texts is not None or b'"usage":{' in chunk or b'data: {"error"' in chunk:
                self._parse_events(chunk, rec, texts)

    @staticmethod
    def _parse_events(chunk: bytes, rec: Timed, texts: list[str] | None = None) -> None:
        """The usage chunk's token count into ``rec``; with ``texts``, every choice's text appended to it."""
        for event in chunk.split(b"\n\n"):
            if not event.startswith(b"data: {"):
                continue
            obj = json.loads(event[6:])
            if "error" in obj:
                raise StreamError(f"error event in the stream: {obj['error']}")
            if texts is not None:
                texts.extend(str(c.get("text", "")) for c in obj.get("choices") or ())
            if obj.get("usage"):
                rec.num_tokens = int(obj["usage"]["completion_tokens"])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
