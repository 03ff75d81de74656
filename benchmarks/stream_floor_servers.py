"""The floor servers of benchmarks/stream_floor.py: what one SSE chunk per token costs in Python with nothing of
TokenRouter in the way.

    .venv/bin/python benchmarks/stream_floor_servers.py --variant {asgi,raw-task,raw-direct} --port 8123

Each serves ``POST /v1/completions`` (streamed, ``max_tokens`` tokens, then a usage chunk and ``[DONE]``) and
``GET /metrics`` and ``/health`` (``tokenrouter_tokens_total``, so the bench's load generator counts tokens as it
does against TokenRouter). Tokens come from two in-process "models", as in the emulated R2R config: a step takes
6.0 ms (small) or 27.9 ms (large), and moves every stream waiting on that model on with P = [[0.65, 0.35], [1, 0]],
committing a token as C = [[1, 0], [1, 0]] says (the small model's token is dropped when the stream goes to the
large one, as in R2R). No process boundary, no engine, no tokenizer, no routing core: a timer and a write per token.

* ``asgi``: a bare ASGI app on uvicorn (httptools, uvloop), as TokenRouter's front end runs, without FastAPI;
  each stream is its own task, woken through an ``asyncio.Queue`` per step, writing through ASGI ``send``.
* ``raw-task``: an ``asyncio.Protocol`` on uvloop (no HTTP framework), the same task and queue per stream,
  writing to the transport.
* ``raw-direct``: the same protocol, but the step writes every stream's chunk itself: no task wakes per token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from typing import Any

STEP_S = (0.0060, 0.0279)
P = ((0.65, 0.35), (1.0, 0.0))
C = ((1, 0), (1, 0))
TEXT = json.dumps(" the")[1:-1]
HEAD = (
    b'data: {"id":"cmpl-floor","object":"text_completion","created":0,"model":"tokenrouter",'
    b'"choices":[{"index":0,"text":"'
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
TAIL = b'","logprobs":null,"finish_reason":null}]}\n\n'


class Stream:
    """One request's answer: ``left`` tokens to go; ``write`` takes the bytes of one SSE event (None: the end)."""

    def __init__(self, max_tokens: int, write: Any, direct: bool) -> None:
        self.left, self.num_tokens, self.write, self.direct = max_tokens, 0, write, direct
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    def push(self, text: str) -> None:
        """One committed token: its chunk goes now (direct) or to the stream's task."""
        self.left -= 1
        self.num_tokens += 1
        events = [HEAD + text.encode() + TAIL]
        if self.left == 0:
            usage = {"usage": {"prompt_tokens": 5, "completion_tokens": self.num_tokens}, "choices": []}
            usage_event = b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n"
            events += [usage_event, b"data: [DONE]\n\n", None]
        for event in events:
            if self.direct:
                self.write(event)
            else:
                self.queue.put_nowait(event)

    async def pump(self) -> None:
        """The stream's task: write each event as the queue gives it, until the end."""
        while (event := await self.queue.get()) is not None:
            await self.write(event)
        await self.write(None)


class Models:
    """Two emulated models stepping while they have streams waiting; every stream starts at the small one."""

    def __init__(self) -> None:
        self.waiting: tuple[list[Stream], list[Stream]] = ([], [])
        self.wake = (asyncio.Event(), asyncio.Event())
        self.rng = random.Random(0)
        self.total = 0
        self.tasks = [asyncio.ensure_future(self._step_forever(m)) for m in (0, 1)]

    def add(self, stream: Stream) -> None:
        self._enqueue(0, stream)

    def _enqueue(self, model: int, stream: Stream) -> None:
        self.waiting[model].append(stream)
        self.wake[model].set()

    async def _step_forever(self, model: int) -> None:
        while True:
            await self.wake[model].wait()
            self.wake[model].clear()
            batch = self.waiting[model][:]
            self.waiting[model].clear()
            await asyncio.sleep(STEP_S[model])
            for stream in batch:
                if stream.closed:
                    continue
                following = 0 if self.rng.random() < P[model][0] else 1
                if C[model][following]:
                    self.total += 1
                    stream.push(TEXT)
                if stream.left > 0:
                    self._enqueue(following, stream)
            if self.waiting[model]:
                self.wake[model].set()

    def metrics(self) -> bytes:
        return f'tokenrouter_tokens_total{{model="floor"}} {self.total}\n'.encode()


def max_tokens_of(body: bytes) -> int:
    return int(json.loads(body or b"{}").get("max_tokens", 16))


# -- a bare ASGI app on uvicorn ------------------------------------------------------------------------------------


def asgi_app() -> Any:
    state: dict[str, Models] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        models = state.setdefault("models", Models())
        if scope["path"] in ("/metrics", "/health"):
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": models.metrics()})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

        async def write(event: bytes | None) -> None:
            await send({"type": "http.response.body", "body": event or b"", "more_body": event is not None})

        stream = Stream(max_tokens_of(body), write, direct=False)
        models.add(stream)
        try:
            await stream.pump()
        finally:
            stream.closed = True

    return app


async def serve_asgi(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(asgi_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    await uvicorn.Server(config).serve()


# -- a raw asyncio protocol ----------------------------------------------------------------------------------------


class RawHttp(asyncio.Protocol):
    """Keep-alive HTTP/1.1 for the two routes, answers chunked; requests on one connection come one at a time."""

    def __init__(self, models: Models, direct: bool) -> None:
        self.models, self.direct, self.buffer = models, direct, b""
        self.transport: Any = None
        self.stream: Stream | None = None
        self.pump: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.closed = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, rest = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.lower().split(b"\r\n")
            length = next((int(h.split(b":")[1]) for h in lines if h.startswith(b"content-length:")), 0)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self._answer(head.split(b" ", 2)[1], rest[:length])

    def _answer(self, path: bytes, body: bytes) -> None:
        if path in (b"/metrics", b"/health"):
            text = self.models.metrics()
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))
            return
        self.transport.write(SSE_HEAD)
        self.stream = Stream(max_tokens_of(body), self._write if self.direct else self._write_async, self.direct)
        self.models.add(self.stream)
        if not self.direct:
            self.pump = asyncio.ensure_future(self.stream.pump())

    def _write(self, event: bytes | None) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event) if event is not None else b"0\r\n\r\n")

    async def _write_async(self, event: bytes | None) -> None:
        self._write(event)


async def serve_raw(port: int, direct: bool) -> None:
    models = Models()
    server = await asyncio.get_running_loop().create_server(lambda: RawHttp(models, direct), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=["asgi", "raw-task", "raw-direct"], required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    from trserve import eventloop

    if args.variant == "asgi":
        eventloop.run(serve_asgi(args.port))
    else:
        eventloop.run(serve_raw(args.port, direct=args.variant == "raw-direct"))


if __name__ == "__main__":
    main()
