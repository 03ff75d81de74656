"""A step's report overlaps the next step when the engine steps without the host (``emulated.overlap``): the
loop starts step n+1, sends step n's report, then waits for step n+1. A scripted mailbox and an emulated engine
that log what happened in order; the tokens come from the hash reference, independent of the loop."""

from __future__ import annotations

import time
from typing import Any

import pytest

from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trserve.engine.emulated import EmulatedEngine, EmulatedLatency
from trserve.engine.hash import hash_next
from trserve.engine.types import OverlappingEngine
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import Handoffs, StepReport
from trserve.runtime.transport import FRONTEND

PROMPT = (300, 301, 302)


class LoggedMailbox:
    """Delivers its script, then each of ``later`` on the following receives, then nothing; logs each report it is
    asked to send into ``log``."""

    def __init__(self, log: list[tuple[str, Any]], script: list[Any], *later: list[Any]) -> None:
        self.log, self.deliveries = log, [script, *later]

    def send(self, dest: int, message: Any) -> None:
        assert isinstance(message, StepReport if dest == FRONTEND else Handoffs)
        self.log.append(("report" if dest == FRONTEND else f"hand-off to {dest}", message))

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        return self.deliveries.pop(0) if self.deliveries else []

    def rewire(self, dest: int, address: str) -> None: ...


class LoggedEngine(EmulatedEngine):
    """An emulated engine (1 ms steps) that logs when its steps start and finish."""

    def __init__(self, log: list[tuple[str, Any]], overlaps: bool) -> None:
        super().__init__(0, EmulatedLatency.by_batch_s(0.001), overlaps=overlaps)
        self.log = log

    def start(self, items: Any) -> None:
        self.log.append(("start", None))
        super().start(items)

    def finish(self) -> Any:
        self.log.append(("finish", None))
        return super().finish()


def arrival(rid: str, max_tokens: int, schedule: list[list[Any]] | None = None) -> PeerReq:
    spec = RequestSpec(rid, len(PROMPT), max_tokens)
    extra = {"handoff_prob": 0.0, "schedule": schedule or []}
    return PeerReq(rid, 0, PROMPT, (0, 0), CLIENT, spec=spec, extra=extra)


def run(overlaps: bool, max_tokens: int = 3, others: tuple[PeerReq, ...] = ()) -> list[tuple[str, Any]]:
    """Request "r" stays on model 0 for ``max_tokens`` steps (with ``others`` in its first batch), then the loop
    idles once."""
    log: list[tuple[str, Any]] = []
    sub = Subserver(ScheduleProgram(0, 2), BatchingPolicy(threshold=1))
    box = LoggedMailbox(log, [arrival("r", max_tokens), *others])
    loop = SubserverLoop(sub, LoggedEngine(log, overlaps), box, idle_poll_s=0.0)
    for _ in range(max_tokens + 1):
        loop.run_once()
    return log


def reference_tokens(n: int) -> list[int]:
    seq = list(PROMPT)
    for _ in range(n):
        seq.append(hash_next(0, seq).token_id)
    return seq[len(PROMPT) :]


def test_the_emulated_engine_is_an_overlapping_engine():
    engine = EmulatedEngine(0, EmulatedLatency.by_batch_s(0.001))
    assert isinstance(engine, OverlappingEngine) and engine.overlaps


def test_with_overlap_each_report_goes_while_the_next_step_runs():
    log = run(overlaps=True)
    kinds = [kind for kind, _ in log]
    # Step 1's report goes after step 2 started; the last step's report goes when the loop has nothing to launch.
    assert kinds == ["start", "finish", "start", "report", "finish", "start", "report", "finish", "report"]


def test_without_overlap_each_report_goes_before_the_next_step():
    kinds = [kind for kind, _ in run(overlaps=False)]
    assert kinds == ["start", "finish", "report"] * 3


def test_with_overlap_hand_offs_still_go_before_the_next_step():
    # "h" moves to model 1 after its first step; "r" goes on here. The peer may be idle, waiting for "h".
    log = run(overlaps=True, others=(arrival("h", 5, schedule=[[1, True]]),))
    kinds = [kind for kind, _ in log]
    assert kinds[:6] == ["start", "finish", "hand-off to 1", "start", "report", "finish"]
    (handoff,) = [msg for kind, msg in log if kind == "hand-off to 1"]
    assert [m.request_id for m in handoff.requests] == ["h"] and handoff.sent_at > 0
    assert log[4][1].num_handoffs == 1


@pytest.mark.parametrize("overlaps", [True, False])
def test_reports_carry_the_reference_tokens_either_way(overlaps):
    reports = [msg for kind, msg in run(overlaps) if kind == "report"]
    expected = reference_tokens(3)
    streamed = [t for r in reports for _, _, tokens in r.tokens for t in tokens]
    finished = [f for r in reports for f in r.finished]
    assert streamed == expected[:2]  # the last step's token arrives with the finish, as the whole output
    assert len(finished) == 1 and list(finished[0].token_ids) == expected
    # Each report's emulated latency is its own step's (1 ms), not the next step's.
    assert [r.emulated_s for r in reports] == [0.001] * 3


def test_host_gap_is_measured_between_back_to_back_steps_only():
    reports = [msg for kind, msg in run(overlaps=True) if kind == "report"]
    assert reports[0].host_gap_s is None  # the first step followed an idle loop
    assert all(r.host_gap_s is not None and 0 <= r.host_gap_s < r.step_s * 50 for r in reports[1:])


def test_a_deferred_report_says_what_its_own_step_did_though_a_peer_handed_the_request_back_meanwhile():
    # "h" moves to model 1 after step 1; model 1 steps it and hands it back before model 0's loop starts step 2,
    # whose start sends step 1's report. The report must say what step 1 did: one token, then model 1 continues
    # after one output token with the routing state step 1 left (a resume after a crash starts from it).
    log: list[tuple[str, Any]] = []
    t0 = hash_next(0, list(PROMPT)).token_id
    t1 = hash_next(1, [*PROMPT, t0]).token_id
    back = PeerReq("h", len(PROMPT), (t0, t1), (len(PROMPT), len(PROMPT) + 1), 1, extra={"schedule_step": 2})
    script = [arrival("r", 3), arrival("h", 5, schedule=[[1, True], [0, True]])]
    box = LoggedMailbox(log, script, [Handoffs((back,), sent_at=time.time())])
    sub = Subserver(ScheduleProgram(0, 2), BatchingPolicy(threshold=1))
    loop = SubserverLoop(sub, LoggedEngine(log, overlaps=True), box, idle_poll_s=0.0)
    loop.run_once()
    loop.run_once()  # takes the hand-back, starts step 2 (with "h"), sends step 1's report
    first = next(msg for kind, msg in log if kind == "report")
    assert ("h", 0, (t0,)) in first.tokens
    (route,) = [r for r in first.routes if r[0] == "h"]
    assert route[1:3] == (1, 1) and route[3]["schedule_step"] == 1
