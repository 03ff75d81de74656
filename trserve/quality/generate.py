"""Routed answers to the evaluation set: the real server's processes (front end, subserver loops, vLLM engines)
started once, in this process as cross-validation does (:func:`trserve.crossval.harness.crossval_server`), and
the routing program swapped between sweep points without a restart. Greedy, chat template, each output token
tagged with the model that committed it (:attr:`trserve.frontend.generation.Generation.models`)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from trcore import RequestSpec
from trserve.config import ServeConfig
from trserve.crossval.harness import CrossvalFrontEnd, crossval_server
from trserve.crossval.messages import ProgramChoice
from trserve.engine.tokenizer import Tokenizer
from trserve.runtime.runspec import resolve_model_path
from trserve.server.launch import LaunchError

log = logging.getLogger(__name__)

GREEDY: dict[str, Any] = {"temperature": 0.0, "top_p": 1.0, "seed": None}


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
        self._ids = itertools.count()

    def encode(self, prompt: str) -> list[int]:
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
        """Answer every prompt (greedy, ``concurrency`` in flight) with ``program(**params)`` on every model;
        TimeoutError after ``timeout_s`` (a stuck run must not hold the measurement lock)."""
        choice = ProgramChoice.of(program, params)
        choice.create(0, self.cfg.num_models)  # bad parameters fail here, not in a worker
        for m in range(self.cfg.num_models):
            await self.frontend.reconfigure(m, program=choice)
        limit = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> Answer:
            async with limit:
                return await self._one(self.encode(prompt), max_tokens)

        return list(await asyncio.wait_for(asyncio.gather(*(one(p) for p in prompts)), timeout_s))

    async def _one(self, ids: list[int], max_tokens: int) -> Answer:
        rid = f"quality-{next(self._ids)}"
        spec = RequestSpec(
            rid, len(ids), max_tokens, frozenset(self.tokenizer.eos_token_ids), time.monotonic(), dict(GREEDY)
        )
        gen = self.frontend.submit(spec, ids, {})
        while True:
            kind, value = await gen.events.get()
            if kind == "done":
                break
            if kind == "error":
                raise RuntimeError(f"request {rid} failed: {value}")
        tokens, models = tuple(gen.output), tuple(gen.models)
        return Answer(tokens, models, self.tokenizer.decode(tokens))


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
            yield AnswerServer(cfg, frontend)
        return
