"""Routed answers to the evaluation set, read from the server's own OpenAI API: the real server's processes (front
end, subserver loops, vLLM engines) started once, in this process as cross-validation does
(:func:`trserve.crossval.harness.crossval_server`), its HTTP app (:func:`trserve.frontend.app.create_app`) called
in-process through httpx's ASGI transport, and the routing program swapped between sweep points without a restart.
Greedy, chat template; each answer brings its output tokens and the model that committed each
(``return_token_ids``, ``return_provenance``), as any client of the server reads them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from trserve.config import ServeConfig
from trserve.crossval.harness import CrossvalFrontEnd, crossval_server
from trserve.crossval.messages import ProgramChoice
from trserve.engine.tokenizer import Tokenizer
from trserve.frontend.app import ServerContext, create_app
from trserve.pairs.fill import with_pair_router
from trserve.runtime.runspec import resolve_model_path
from trserve.server.launch import LaunchError

log = logging.getLogger(__name__)

#: What every question's request asks for besides its messages and length: greedy, tokens and their models.
REQUEST: dict[str, Any] = {"temperature": 0.0, "top_p": 1.0, "return_token_ids": True, "return_provenance": True}


@dataclass(frozen=True)
class Answer:
    """One routed answer: output token ids, the model that committed each, and the decoded text."""

    token_ids: tuple[int, ...]
    models: tuple[int, ...]
    text: str

    def num_by_model(self, num_models: int) -> list[int]:
        return [sum(1 for m in self.models if m == k) for k in range(num_models)]


class AnswerServer:
    """A started routed server (models of ``cfg``) that answers prompt lists under a given routing program."""

    def __init__(self, cfg: ServeConfig, frontend: CrossvalFrontEnd) -> None:
        self.cfg = cfg
        self.frontend = frontend
        self.tokenizer = Tokenizer(resolve_model_path(cfg.models[cfg.entry_model].path))
        paths = tuple(resolve_model_path(m.path) for m in cfg.models if m.path is not None)
        app = create_app(ServerContext(cfg, frontend, self.tokenizer, frontend.metrics, None, paths))
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://quality", timeout=None)
        self._model_index = {m.name: k for k, m in enumerate(cfg.models)}

    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids as the server's chat endpoint makes them."""
        return self.tokenizer.encode_chat([{"role": "user", "content": prompt}])

    async def answer(
        self,
        program: str,
        params: Mapping[str, Any],
        prompts: Sequence[str],
        max_tokens: int,
        concurrency: int,
        timeout_s: float = 900.0,
    ) -> list[Answer]:
        """Answer every prompt (greedy, ``concurrency`` in flight) with ``program(**params)`` on every model (r2r's
        and citer's router: the config pair's unless ``params`` name one);
        TimeoutError after ``timeout_s`` (a stuck run must not hold the measurement lock)."""
        choice = ProgramChoice.of(program, with_pair_router(program, params, self.cfg.pair))
        choice.create(0, self.cfg.num_models)  # bad parameters fail here, not in a worker
        for m in range(self.cfg.num_models):
            await self.frontend.reconfigure(m, program=choice)
        limit = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> Answer:
            async with limit:
                return await self._one(prompt, max_tokens)

        return list(await asyncio.wait_for(asyncio.gather(*(one(p) for p in prompts)), timeout_s))

    async def _one(self, prompt: str, max_tokens: int) -> Answer:
        body = {"model": self.cfg.server.served_model_name, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens, **REQUEST}  # fmt: skip
        response = await self.client.post("/v1/chat/completions", json=body)
        if response.status_code != 200:
            raise RuntimeError(f"quality: the server answered {response.status_code} to {prompt!r}: {response.text}")
        choice = response.json()["choices"][0]
        models = tuple(self._model_index[name] for name in choice["provenance"])
        return Answer(tuple(choice["token_ids"]), models, choice["message"]["content"])


@asynccontextmanager
async def answer_server(
    cfg: ServeConfig, attempts: int = 3, startup_timeout_s: float = 180.0
) -> AsyncIterator[AnswerServer]:
    """Start the routed server of ``cfg`` (every routing signal on) for :class:`AnswerServer`; stop it on exit.

    A start that is not ready within ``startup_timeout_s`` is retried (``attempts`` in all): on the shared 2-core
    machine a start now and then never reported ready, while the next one took 20 s."""
    server = cfg.server.model_copy(update={"startup_timeout_s": min(startup_timeout_s, cfg.server.startup_timeout_s)})
    quick = cfg.model_copy(update={"server": server})
    for attempt in range(1, attempts + 1):
        stack = AsyncExitStack()
        try:
            frontend = await stack.enter_async_context(crossval_server(quick))
        except LaunchError as exc:
            await stack.aclose()
            if attempt == attempts:
                raise
            log.warning("quality: server start %d of %d failed, retrying: %s", attempt, attempts, exc)
            continue
        async with stack:
            answers = AnswerServer(cfg, frontend)
            stack.push_async_callback(answers.client.aclose)
            yield answers
        return
