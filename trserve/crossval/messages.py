"""Crossval's messages between its front end and subserver workers (in a module of their own so both sides
unpickle them as the same classes: the worker runs as ``__main__``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trcore import BatchingPolicy, RoutingProgram


@dataclass(frozen=True)
class Reconfigure:
    """Sent only while the model holds no request: replace the policy and program (None = keep), switch trace
    recording. Answered with :class:`TraceDump`."""

    token: int
    policy: BatchingPolicy | None = None
    program: RoutingProgram | None = None
    record_trace: bool = False


@dataclass(frozen=True)
class TraceDump:
    """A model's routing events (``trcore.RouteEvent`` tuples) recorded since the previous ``Reconfigure``."""

    model: int
    token: int
    events: list[tuple[Any, ...]] = field(default_factory=list)
    num_resident: int = 0
