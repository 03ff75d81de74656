"""Routed answers to the evaluation set: the real server's processes (front end, subserver loops, vLLM engines)
started once, in this process as cross-validation does (:func:`trserve.crossval.harness.crossval_server`), and
the routing program swapped between sweep points without a restart. Greedy, chat template, each output token
tagged with the model that committed it (:attr:`trserve.frontend.generation.Generation.models`)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from trcore import PROGRAMS, RequestSpec
from trserve.config import ServeConfig
from trserve.crossval.harness import CrossvalFrontEnd, crossval_server
from trserve.engine.tokenizer import Tokenizer
from trserve.runtime.runspec import resolve_model_path

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
        self, program: str, params: Mapping[str, Any], prompts: Sequence[str], max_tokens: int, concurrency: int
    ) -> list[Answer]:
        """Answer every prompt (greedy, ``concurrency`` in flight) with ``program(**params)`` on every model."""
        n = self.cfg.num_models
        for m in range(n):
            await self.frontend.reconfigure(m, program=PROGRAMS.create(program, m, n, **dict(params)))
        limit = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> Answer:
            async with limit:
                return await self._one(self.encode(prompt), max_tokens)

        return list(await asyncio.gather(*(one(p) for p in prompts)))

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
async def answer_server(cfg: ServeConfig) -> AsyncIterator[AnswerServer]:
    """Start the routed server of ``cfg`` (every routing signal on) for :class:`AnswerServer`; stop it on exit."""
    async with crossval_server(cfg) as frontend:
        yield AnswerServer(cfg, frontend)
