"""A routing program that raises on a step fails that step's requests with a message naming it, and the model's
loop goes on serving (it used to end the worker process; the restart replayed the request, which ended it again,
until the server stopped serving)."""

from __future__ import annotations

from tests.serve.runtime.test_isolation import Inbox, read_reports
from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trserve.engine.hash import HashEngine
from trserve.runtime.loop import SubserverLoop


class Fragile(ScheduleProgram):
    """Breaks on any step holding the request ``boom``."""

    name = "fragile"

    def route(self, step):
        if "boom" in step.request_ids:
            raise ValueError("cannot route boom")
        return super().route(step)


def message(rid: str, prompt: list[int], max_tokens: int = 4) -> PeerReq:
    return PeerReq(rid, 0, tuple(prompt), (0,), CLIENT, spec=RequestSpec(rid, len(prompt), max_tokens))


def test_a_program_error_fails_its_step_and_the_loop_serves_on():
    box = Inbox()
    sub = Subserver(Fragile(0, 1), BatchingPolicy(threshold=1, max_wait_s=0.0))
    loop = SubserverLoop(sub, HashEngine(0), box, idle_poll_s=0.0)
    arrivals = {0: [message("early", [300, 301])], 6: [message("boom", [400, 401])], 8: [message("late", [500])]}
    finished: dict[str, list[int]] = {}
    failed: dict[str, str] = {}
    for step in range(40):
        box.queue += arrivals.get(step, [])
        loop.run_once()
        read_reports(box, finished, failed)
    assert set(finished) == {"early", "late"} and len(finished["late"]) == 4
    assert failed == {"boom": "router.fragile: route() raised ValueError: cannot route boom"}
    assert not sub.requests and sub.running is None
