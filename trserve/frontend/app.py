"""The OpenAI-compatible HTTP API (FastAPI): completions, chat completions, models, health, metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from trserve.config import ServeConfig
from trserve.engine.tokenizer import Tokenizer
from trserve.frontend.admin import install_admin_routes
from trserve.frontend.admission import Limits, Refused, admit
from trserve.frontend.api_models import ChatCompletionRequest, CompletionRequest, SamplingFields
from trserve.frontend.book import FrontEnd
from trserve.frontend.errors import APIError, error_response
from trserve.frontend.generation import Overloaded, Unavailable
from trserve.frontend.guards import guard
from trserve.frontend.metrics import Metrics
from trserve.frontend.responses import Provenance, ResponseFormat, to_json
from trserve.frontend.sse import EventStream
from trserve.frontend.streaming import ClientGone, GenerationFailed, collect, events_with_text, first_event
from trserve.frontend.text import TextStream

#: Text longer than this (characters) is tokenized on a thread of its own, which the tokenizer's Rust code runs
#: beside the event loop: a prompt of 1 MB (the default body limit) takes about a second to encode, and on the
#: loop it stalled every stream for as long. Shorter text is encoded inline, where a thread hop would cost more.
LONG_TEXT_CHARS = 16_384
#: One thread: long prompts are encoded one at a time, never concurrently on the shared tokenizer.
_TOKENIZE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenrouter-tokenize")


@dataclass
class ServerContext:
    """What the routes need: config, front end, tokenizer, metrics, and a view of worker health."""

    config: ServeConfig
    frontend: FrontEnd
    tokenizer: Tokenizer
    metrics: Metrics
    api_key: str | None
    model_paths: tuple[str, ...] = ()
    started: float = field(default_factory=time.time)
    limits: Limits = field(init=False)
    provenance: Provenance = field(init=False)

    def __post_init__(self) -> None:
        self.limits = Limits.of_run(self.config, self.model_paths, self.tokenizer)
        self.provenance = Provenance(tuple(m.name for m in self.config.models))

    @property
    def model_name(self) -> str:
        return self.config.server.served_model_name


def create_app(ctx: ServerContext) -> Any:
    """The ASGI application: FastAPI routes behind the body-size and API-key guards."""
    app = FastAPI(title="TokenRouter", docs_url=None, redoc_url=None)
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        down = {str(k): v for k, v in ctx.frontend.down.items()}
        status = 503 if down else 200
        return JSONResponse({"status": "degraded" if down else "ok", "down": down}, status_code=status)

    @app.get("/metrics")
    async def metrics() -> Response:
        ctx.metrics.observe_states(await ctx.frontend.probe(timeout_s=1.0))  # gauges as of now, not last step
        return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": ctx.model_name, "object": "model", "created": int(ctx.started), "owned_by": "tokenrouter"}
        return {"object": "list", "data": [card]}

    @app.get("/debug/state")
    async def state(detail: bool = False) -> dict[str, Any]:
        states = await ctx.frontend.probe(timeout_s=30.0 if detail else 5.0, detail=detail)
        fe = ctx.frontend
        return {
            "active": fe.num_active,
            "waiting": len(fe.waiting),
            "in_flight": len(fe.generations),
            "down": {str(k): v for k, v in fe.down.items()},
            "workers": [s.__dict__ for s in states],
            "inboxes": {"frontend": fe.mailbox.address, **{str(p): a for p, a in fe.mailbox.addresses.items()}},
            "received": dict(fe.mailbox.counts),
            "adaptive": fe.tuner.state() if fe.tuner is not None else None,
            "kv_admission": fe.kv_gate.state(),
        }

    install_admin_routes(app, ctx.config, ctx.frontend)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        prompt = body.one_prompt
        try:
            if isinstance(prompt, str):
                ids = await _encode(ctx.tokenizer.encode, prompt, len(prompt))
            else:
                ids = [int(t) for t in prompt]
        except Exception as exc:  # text the tokenizer cannot take (e.g. a lone surrogate, "\ud800", in the JSON)
            raise APIError(400, f"prompt: the tokenizer cannot encode it: {exc}", param="prompt") from None
        return await _generate(ctx, request, body, ids, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            ids = await _encode(ctx.tokenizer.encode_chat, messages, sum(len(m["content"]) for m in messages))
        except Exception as exc:  # the model's chat template rejects this conversation (e.g. role order)
            raise APIError(400, f"messages: the chat template cannot render them: {exc}", param="messages") from None
        return await _generate(ctx, request, body, ids, body.output_limit, chat=True)

    return guard(
        app, max_body_bytes=ctx.config.server.max_body_bytes, api_key=ctx.api_key, open_paths=("/health", "/metrics")
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> Response:
        return error_response(exc.status, exc.message, exc.kind, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        while len(loc) > 1 and _is_type_name(loc[-1]):  # pydantic names the union member tried; the field is enough
            loc.pop()
        if first.get("type") == "json_invalid":
            return error_response(400, f"malformed JSON body: {first.get('msg')}")
        if not loc and (first.get("type") == "missing" or isinstance(first.get("input"), bytes)):
            return error_response(400, _no_json_object(request.headers.get("content-type")))  # none, or not read
        param = ".".join(loc) or None
        return error_response(400, f"{param or 'body'}: {_reason(first)}", param=param)

    @app.exception_handler(ClientGone)
    async def gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> Response:  # Starlette still re-raises it: the log has it
        return error_response(500, f"internal error ({type(exc).__name__}); see the server's log", "internal_error")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "error")


async def _encode(encode: Callable[[Any], list[int]], text: Any, num_chars: int) -> list[int]:
    """``encode(text)``, on the tokenizing thread when the text is long (see :data:`LONG_TEXT_CHARS`)."""
    if num_chars <= LONG_TEXT_CHARS:
        return encode(text)
    return await asyncio.get_running_loop().run_in_executor(_TOKENIZE, encode, text)


def _is_type_name(part: str) -> bool:
    return "[" in part or part in {"str", "int", "float", "bool", "dict", "list", "none"}


def _no_json_object(content_type: str | None) -> str:
    """Why FastAPI found no JSON object in a body: none was sent (or ``null``), or its Content-Type is not JSON
    (curl's ``-d`` sends form data), so FastAPI passed it on as bytes, which pydantic would call "not a valid
    dictionary" however good the JSON."""
    media = (content_type or "").split(";")[0].strip().lower()
    if not media or media == "application/json" or media.endswith("+json"):
        return "the request body is empty (or null): send a JSON object"
    return f"the body must be JSON sent with Content-Type: application/json (got {content_type!r})"


def _reason(error: Any) -> str:
    """A pydantic error's message as a client should read it."""
    if error.get("type") == "extra_forbidden":
        return "not a field this server accepts (refused rather than ignored; see docs/serving.md)"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def _admit(
    ctx: ServerContext, body: SamplingFields, ids: list[int], max_tokens: int | None, chat: bool
) -> tuple[Any, TextStream]:
    try:
        kv = ctx.frontend.kv_capacity
        spec = admit(ctx.limits, body, ids, max_tokens, chat, kv_capacity=min(kv.values()) if kv else None)
    except Refused as exc:
        raise APIError(400, f"{exc.param}: {exc.message}", param=exc.param) from None
    try:
        gen = ctx.frontend.submit(spec, ids, body.routing_extra or {})
    except Overloaded as exc:
        raise APIError(429, f"server busy: {exc}", "rate_limit_exceeded", headers={"Retry-After": "1"}) from None
    except Unavailable as exc:
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
        raise APIError(503, str(exc), "service_unavailable", headers=headers) from None
    return gen, TextStream(ctx.tokenizer, body.stop_strings, body.min_tokens, spec.stop_token_ids)


async def _generate(
    ctx: ServerContext, request: Request, body: SamplingFields, ids: list[int], max_tokens: int | None, *, chat: bool
) -> Response:
    gen, text = _admit(ctx, body, ids, max_tokens, chat)
    fmt = ResponseFormat(ctx.model_name, gen.request_id, chat, len(ids), ctx.provenance, body.return_provenance)
    try:
        if not body.stream:
            pieces, reason = await collect(ctx.frontend, gen, text, request)
            answer = fmt.whole("".join(pieces), reason, gen.models[: len(text.token_ids)])
            if body.return_token_ids:
                answer["prompt_token_ids"] = ids
                answer["choices"][0]["token_ids"] = list(text.token_ids)
            return JSONResponse(answer)
        first = await first_event(ctx.frontend, gen, request)
    except GenerationFailed as exc:
        raise APIError(exc.status, str(exc), exc.kind) from None
    return EventStream(_sse(ctx, fmt, gen, text, first, body.include_usage))


async def _sse(
    ctx: ServerContext, fmt: ResponseFormat, gen: Any, text: TextStream, first: tuple[str, Any], include_usage: bool
) -> AsyncGenerator[bytes, None]:
    """The stream's chunks; each carries the models of the output tokens consumed since the previous one (text
    held back for a possible stop string, or by ``server.stream_interval``, comes in a later chunk, its tokens'
    models with it)."""
    try:
        if fmt.chat:
            yield _data(fmt.chunk(None, None, role=True))
        interval, held, sent = ctx.config.server.stream_interval, "", 0
        async for delta, reason in events_with_text(ctx.frontend, gen, text, first):
            held += delta
            upto = len(text.token_ids)
            if reason or (held and (sent == 0 or upto - sent >= interval)):
                yield fmt.sse_chunk(held, reason, gen.models[sent:upto])
                held, sent = "", upto
        if include_usage:
            yield _data(fmt.usage_chunk(gen.models[: len(text.token_ids)]))
    except GenerationFailed as exc:
        yield _data({"error": {"message": str(exc), "type": exc.kind, "param": None, "code": exc.status}})
    finally:
        ctx.frontend.abort(gen.request_id)  # no-op once finished; frees every model if the client left
    yield b"data: [DONE]\n\n"


def _data(obj: dict[str, Any]) -> bytes:
    return f"data: {to_json(obj)}\n\n".encode()
