"""The subserver loop's threshold follows the :class:`Active` counts the front end sends: a scripted mailbox, a
hand-driven clock, the hash engine. A fall of the count launches a queue that waits below its threshold (no
polling needed: the message is the wake-up), and a max-wait deadline still fires on its own."""

from __future__ import annotations

from typing import Any

import pytest

from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trserve.engine.hash import HashEngine
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import Active, StepReport
from trserve.runtime.transport import FRONTEND

IDLE_POLL_S = 7.0


class ScriptedMailbox:
    """Hands out one scripted delivery per ``receive_all`` call (then nothing) and records the waits asked for."""

    def __init__(self) -> None:
        self.script: list[list[Any]] = []
        self.waits: list[float | None] = []
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, message: Any) -> None:
        self.sent.append((dest, message))

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        if timeout_s:
            self.waits.append(timeout_s)
        return self.script.pop(0) if self.script else []

    def rewire(self, dest: int, address: str) -> None: ...

    def steps(self) -> list[int]:
        """The batch size of every step reported so far."""
        return [m.batch_size for d, m in self.sent if d == FRONTEND and isinstance(m, StepReport)]


def request(rid: str) -> PeerReq:
    spec = RequestSpec(rid, 2, 50)
    return PeerReq(rid, 0, (300, 301), (0, 0), CLIENT, spec=spec, extra={"handoff_prob": 0.0})


def make(max_wait_s: float | None = None) -> tuple[SubserverLoop, ScriptedMailbox, list[float]]:
    now = [0.0]
    box = ScriptedMailbox()
    sub = Subserver(ScheduleProgram(0, 2), BatchingPolicy(threshold=4, max_wait_s=max_wait_s))
    loop = SubserverLoop(sub, HashEngine(0), box, clock=lambda: now[0], idle_poll_s=IDLE_POLL_S)
    return loop, box, now


def test_the_threshold_follows_the_active_count_the_front_end_sends():
    loop, box, _ = make()
    box.script = [[Active(10), request("a"), request("b")]]
    loop.run_once()
    # Ten active: threshold 4, two ready: the loop waits for the next message, it does not poll.
    assert box.steps() == [] and box.waits == [IDLE_POLL_S]
    box.script = [[], [Active(2)]]  # while it waits, two requests end elsewhere: the threshold falls to 2
    loop.run_once()
    assert box.steps() == []  # the count arrived during the wait; the next turn launches
    loop.run_once()
    assert box.steps() == [2]
    box.script = [[Active(5), request("c"), request("d"), request("e")]]
    loop.run_once()  # a, b back in the queue (no hand-offs) with c, d, e: five ready, threshold 4
    assert box.steps() == [2, 5]


def test_a_count_rise_keeps_a_queue_waiting_and_its_deadline_still_fires():
    loop, box, now = make(max_wait_s=0.5)
    box.script = [[Active(8), request("a")]]
    now[0] = 0.1  # the request arrives at 0.1: its deadline is 0.6
    loop.run_once()
    assert box.steps() == [] and box.waits == [pytest.approx(0.5)]  # until the max-wait deadline, not a fixed poll
    now[0] = 0.4
    loop.run_once()
    assert box.steps() == [] and box.waits[-1] == pytest.approx(0.2)
    now[0] = 0.7  # past the deadline: launches alone though the threshold (4) is not reached
    loop.run_once()
    assert box.steps() == [1]
