"""One request on the front end: its committed output, reassembled in order from the models' reports, and the
queue of events the HTTP layer consumes (:mod:`trserve.frontend.streaming`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trcore import RequestSpec


@dataclass
class Generation:
    """One client request in flight: its committed output so far and a queue of events for the HTTP layer.

    Events: ``("tokens", list[int])``, ``("done", reason)``, ``("error", message)``."""

    spec: RequestSpec
    prompt_token_ids: list[int]
    extra: Mapping[str, Any]
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    output: list[int] = field(default_factory=list)
    is_done: bool = False
    is_dispatched: bool = False
    first_token_time: float | None = None
    _early: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    def accept(self, offset: int, tokens: tuple[int, ...]) -> list[int]:
        """Take output tokens that start at ``offset``; returns the newly contiguous ones (reports from two
        models can arrive out of order)."""
        self._early[offset] = tokens
        new: list[int] = []
        progressed = True
        while progressed:
            progressed = False
            for start in sorted(self._early):
                toks = self._early[start]
                end = start + len(toks)
                if start <= len(self.output):
                    del self._early[start]
                    fresh = list(toks[len(self.output) - start :]) if end > len(self.output) else []
                    self.output.extend(fresh)
                    new.extend(fresh)
                    progressed = True
        return new
