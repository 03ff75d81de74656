"""``schedule``: a routing program whose decisions a request carries with it, for tests and debugging.

A request may bring, in ``Request.extra`` (the HTTP field ``routing_extra``):

* ``schedule``: ``[[destination, kept], ...]``, the decision for each of its steps in order, whichever model
  makes the step;
* ``handoff_prob``: after its schedule runs out, the chance that a step hands the request to another model;
* ``decision_key``: what random decisions are keyed by instead of the request id.

Random decisions are a pure function of ``(seed, decision key or request id, step index)``, so a run can be
replayed exactly by a reference loop.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from trcore.errors import ConfigError
from trcore.program import RoutingProgram, register_program
from trcore.request import PeerReq, Request
from trcore.step import Routing, StepResult

STEP_KEY = "schedule_step"


@register_program("schedule")
class ScheduleProgram(RoutingProgram):
    """Parameters: ``handoff_prob`` (default for requests that bring none) and ``seed``. A request's schedule,
    probability and key travel only to a model that has not seen it; its step index travels with every hand-off."""

    fixed_extra_keys = frozenset({"schedule", "handoff_prob", "decision_key"})
    client_extra_keys = fixed_extra_keys

    def __init__(self, model: int, num_models: int, handoff_prob: float = 0.0, seed: int = 0) -> None:
        super().__init__(model, num_models)
        if not 0.0 <= handoff_prob <= 1.0:
            raise ConfigError("schedule.handoff_prob", f"must be within [0, 1], got {handoff_prob}")
        self.handoff_prob = handoff_prob
        self.seed = seed
        self._requests: dict[str, Request] = {}

    @classmethod
    def check_extra(cls, extra: Mapping[str, Any], num_models: int) -> None:
        """``schedule``: pairs ``[destination in 0..num_models-1, kept (bool)]``; ``handoff_prob`` in [0, 1];
        ``decision_key`` a string or integer; ``schedule_step`` is this program's own and may not be sent."""
        if STEP_KEY in extra:
            raise ValueError(f"{STEP_KEY} is kept by the schedule program itself and may not be sent")
        super().check_extra(extra, num_models)
        if not isinstance(extra.get("schedule") or [], list):
            raise ValueError("schedule: must be a list of [destination, kept] pairs")
        for pair in extra.get("schedule") or ():
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and _is_int(pair[0])):
                raise ValueError(f"schedule: each entry must be [destination, kept], got {pair!r}")
            if not 0 <= pair[0] < num_models or not isinstance(pair[1], bool):
                raise ValueError(f"schedule: destination must be in 0..{num_models - 1} and kept a bool, got {pair!r}")
        prob = extra.get("handoff_prob", 0.0)
        if not (isinstance(prob, int | float) and not isinstance(prob, bool) and 0.0 <= prob <= 1.0):
            raise ValueError(f"handoff_prob: must be a number in [0, 1], got {prob!r}")
        key = extra.get("decision_key", "")
        if not isinstance(key, str) and not _is_int(key):
            raise ValueError(f"decision_key: must be a string or an integer, got {key!r}")

    def receive(self, request: Request, peer_req: PeerReq) -> None:
        super().receive(request, peer_req)
        self._requests[request.request_id] = request

    def release(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def route(self, step: StepResult) -> Routing:
        decisions = [self._decide(self._requests[rid]) for rid in step.request_ids]
        return Routing([d for d, _ in decisions], [k for _, k in decisions])

    def _decide(self, request: Request) -> tuple[int, bool]:
        index = int(request.extra.get(STEP_KEY, 0))
        request.extra[STEP_KEY] = index + 1
        schedule: Sequence[Sequence[object]] = request.extra.get("schedule") or ()
        if index < len(schedule):
            dest, kept = schedule[index]
            return int(dest), bool(kept)  # type: ignore[call-overload]
        prob = float(request.extra.get("handoff_prob", self.handoff_prob))
        key = str(request.extra.get("decision_key", request.request_id))
        return random_decision(self.seed, key, index, self.model, self.num_models, prob), True


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def random_decision(seed: int, request_id: str, index: int, model: int, num_models: int, prob: float) -> int:
    """The destination of step ``index`` of a request on ``model`` under hand-off probability ``prob``."""
    rng = random.Random(zlib.crc32(f"{seed}:{request_id}:{index}".encode()))
    if num_models == 1 or rng.random() >= prob:
        return model
    others = [m for m in range(num_models) if m != model]
    return others[rng.randrange(len(others))]
