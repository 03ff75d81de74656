"""A lockstep engine worker frees what it holds when a driver starts: a step call the dead driver sent just before
it died can be read after the front end's aborts, and the request it stepped then held its blocks for ever (seen
killing the driver under load: the engine's pool later refused steps the restarted driver's books allowed)."""

from __future__ import annotations

from typing import Any

from trserve.baselines.engine_worker import DRIVER, EngineHost
from trserve.engine.hash import HashEngine
from trserve.runtime.messages import Abort, StepCall, StepReply


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, message: Any) -> None:
        self.sent.append((dest, message))


def test_a_new_drivers_first_call_frees_what_the_dead_driver_left_on_the_engine():
    engine, outbox = HashEngine(0), Outbox()
    host = EngineHost(engine, outbox, 0)
    host.handle(StepCall(0, []))  # the first driver asks for the budget
    host.handle(StepCall(1, [("a", [1, 2, 3], {}), ("b", [4, 5], {})]))
    host.handle(Abort("b"))  # the front end's abort of "b" arrives first (the driver died) ...
    host.handle(StepCall(2, [("b", [9], {})]))  # ... then the dead driver's last call, which steps "b" again
    assert set(engine.kv) == {"a", "b"}
    host.handle(StepCall(0, []))  # the restarted driver's budget query
    assert engine.kv == {} and host.held == set()
    host.handle(StepCall(1, [("c", [1], {})]))  # the new driver's requests are held as usual
    assert set(engine.kv) == {"c"}
    replies = [msg for dest, msg in outbox.sent if dest == DRIVER]
    assert [type(msg) for msg in replies] == [StepReply] * 5 and [r.call_id for r in replies] == [0, 1, 2, 0, 1]
