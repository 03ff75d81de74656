"""One request on the front end: its committed output, reassembled in order from the models' reports, and the
queue of events the HTTP layer consumes (:mod:`trserve.frontend.streaming`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trcore import CLIENT, PeerReq, RequestSpec
from trserve.runtime.messages import INCARNATION


@dataclass(frozen=True)
class Failure:
    """Why a request ended in error, and the HTTP status that says so (503 unavailable, 504 stalled, 500 bug)."""

    status: int
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class Generation:
    """One client request in flight: its committed output so far and a queue of events for the HTTP layer.

    Events: ``("tokens", list[int])``, ``("done", reason)``, ``("error", Failure)``. ``models[i]`` is the model
    whose step committed ``output[i]`` (its provenance; -1 where the sender is unknown)."""

    spec: RequestSpec
    prompt_token_ids: list[int]
    extra: Mapping[str, Any]
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    output: list[int] = field(default_factory=list)
    models: list[int] = field(default_factory=list)
    is_done: bool = False
    is_dispatched: bool = False
    first_token_time: float | None = None
    #: When a step last moved it (dispatch, resume, a step's report); the stall watchdog reads it.
    last_progress: float = 0.0
    #: Aborted everywhere while a dead model restarts; resumed from ``output`` once it is back.
    is_suspended: bool = False
    #: Output tokens committed before the current incarnation (a resume sends them as prompt).
    base: int = 0
    #: Resume points by output length: ``num_output -> (model, routing extra)`` (see ``StepReport.routes``).
    routes: dict[int, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    #: How many times it was resumed (subservers tell its incarnations apart by it).
    incarnation: int = 0
    #: With replicas: its replica of each model (see :mod:`trserve.frontend.pinning`); None before dispatch.
    pins: tuple[int, ...] | None = None
    #: ``(output length, finish reason)`` once its last step reported, until every token before is here.
    finishing: tuple[int, str] | None = None
    _early: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    def accept(self, offset: int, tokens: tuple[int, ...], model: int = -1) -> list[int]:
        """Take output tokens that start at ``offset``, committed by ``model``; returns the newly contiguous ones
        (reports from two models can arrive out of order). ``offset`` counts from the current incarnation's
        first output token."""
        offset += self.base
        self._early[offset] = (model, tokens)
        new: list[int] = []
        progressed = True
        while progressed:
            progressed = False
            for start in sorted(self._early):
                sender, toks = self._early[start]
                end = start + len(toks)
                if start <= len(self.output):
                    del self._early[start]
                    fresh = list(toks[len(self.output) - start :]) if end > len(self.output) else []
                    self.output.extend(fresh)
                    self.models.extend([sender] * len(fresh))
                    new.extend(fresh)
                    progressed = True
        return new

    def note_route(self, model: int, num_output: int, extra: dict[str, Any] | None) -> None:
        """A step says ``model`` continues the request after ``num_output`` output tokens (of this incarnation)
        with routing state ``extra``. Kept by output length: a resume needs the point that matches the committed
        output exactly (a crash can lose the report of a token a later report builds on)."""
        num_output += self.base
        if num_output >= len(self.output):
            self.routes[num_output] = (model, extra or {})
        if len(self.routes) > 4:
            self.routes = {n: r for n, r in self.routes.items() if n >= len(self.output)}

    @property
    def done_reason(self) -> str | None:
        """The finish reason once its last step reported and every output token before it is here."""
        if self.finishing is not None and len(self.output) >= self.finishing[0]:
            return self.finishing[1]
        return None

    def finish_reason(self) -> str | None:
        """Why the committed output is complete ("length" or "stop"), or None while it may go on. A stop token
        that is also the last token allowed is "stop", as the workers' ``Finished`` and vLLM's check say."""
        spec, n = self.spec, len(self.output)
        if n > spec.min_tokens and self.output[-1] in spec.stop_token_ids:
            return "stop"
        if n >= spec.max_tokens:
            return "length"
        return None

    def resume(self, num_models: int, entry: int) -> tuple[int, PeerReq]:
        """The next incarnation after a crash: the same request id, the committed output appended to the prompt,
        the budget reduced by it, on the model (and with the routing state) of the resume point at that output
        (the entry model with the request's own routing extra before its first step)."""
        n = len(self.output)
        self.base, self._early, self.incarnation, self.finishing = n, {}, self.incarnation + 1, None
        spec = replace(
            self.spec,
            num_prompt_tokens=len(self.prompt_token_ids) + n,
            max_tokens=self.spec.max_tokens - n,
            min_tokens=max(0, self.spec.min_tokens - n),
        )
        model, moving = self.routes.get(n, (entry, {}))  # a route's state leaves out what the request brought
        extra, self.routes = {**self.extra, **moving, INCARNATION: self.incarnation}, {}
        ids = (*self.prompt_token_ids, *self.output)
        return model, PeerReq(self.request_id, 0, ids, (0,) * num_models, CLIENT, spec=spec, extra=extra)


class Overloaded(Exception):
    """More requests wait than the configured limit (HTTP 429)."""


class Unavailable(Exception):
    """The server cannot serve now (a model is down or restarting; HTTP 503)."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
