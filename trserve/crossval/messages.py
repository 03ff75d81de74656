"""Crossval's messages between its front end and subserver workers (in a module of their own so both sides
decode them as the same classes: the worker runs as ``__main__``). They travel typed, as every message does
(:mod:`trserve.runtime.wire`): a routing program goes as its registry name and parameters, and the worker
builds it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trcore import PROGRAMS, BatchingPolicy, RoutingProgram
from trserve.runtime.wire import allow_messages_of

allow_messages_of(__name__)


@dataclass(frozen=True)
class ProgramChoice:
    """A routing program by name (``trcore.PROGRAMS``) with its parameters (plain JSON-like values)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> ProgramChoice:
        return cls(name, dict(params or {}))

    def create(self, model: int, num_models: int) -> RoutingProgram:
        """Model ``model``'s instance (a fresh one: programs hold RNG state)."""
        return PROGRAMS.create(self.name, model, num_models, **self.params)


@dataclass(frozen=True)
class Reconfigure:
    """Sent only while the model holds no request: replace the policy and program (None = keep), switch trace
    recording. Answered with :class:`TraceDump`."""

    token: int
    policy: BatchingPolicy | None = None
    program: ProgramChoice | None = None
    record_trace: bool = False


@dataclass(frozen=True)
class TraceDump:
    """A model's routing events (``trcore.RouteEvent`` fields) recorded since the previous ``Reconfigure``."""

    model: int
    token: int
    events: list[tuple[str, int, int, bool, float, float | None]] = field(default_factory=list)
    num_resident: int = 0
