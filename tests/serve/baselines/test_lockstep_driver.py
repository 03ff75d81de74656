"""The lockstep driver keeps every message that arrives while it waits for an engine's step: a new request that
comes in the same batch as the step's reply is admitted, not dropped (seen under load: requests never finished);
and it learns each engine's KV budget before its first step, so the core accounts for that step's blocks."""

from __future__ import annotations

from typing import Any

from tests.factories import make_spec
from trcore import CLIENT, PROGRAMS, BatchingPolicy, KVBudget, KVMemory, PeerReq, Subserver
from trserve.baselines.lockstep import LockstepDriver, engine_proc
from trserve.runtime.messages import StepCall, StepReply


class ScriptedMailbox:
    """Answers each StepCall with its reply, delivered in one batch together with the next scripted messages."""

    def __init__(self, first: list[Any], with_reply: list[list[Any]]) -> None:
        self.pending = list(first)
        self.with_reply = list(with_reply)
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, message: Any) -> None:
        self.sent.append((dest, message))
        if isinstance(message, StepCall) and not message.items:  # a budget query: 4 blocks of 16, no seq limit
            self.pending.append(StepReply(message.call_id, [], 0.0, 0.0, kv_budget=(4, 16, 0)))
        elif isinstance(message, StepCall):
            outputs = [(7, {}, None) for _ in message.items]
            extra = self.with_reply.pop(0) if self.with_reply else []
            self.pending += [StepReply(message.call_id, outputs, 0.001, 0.0), *extra]

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        out, self.pending = self.pending, []
        return out


def new_request(rid: str) -> PeerReq:
    return PeerReq(rid, 0, (1, 2, 3), (0, 0), CLIENT, spec=make_spec(rid, num_prompt_tokens=3, max_tokens=4))


def driver(mailbox: ScriptedMailbox, memory: Any = None) -> LockstepDriver:
    stay = {"P": [[1.0, 0.0], [1.0, 0.0]], "C": [[1.0, 1.0], [1.0, 1.0]], "seed": 0}
    subs = [Subserver(PROGRAMS.create("markov", m, 2, **stay), BatchingPolicy(threshold=1)) for m in range(2)]
    return LockstepDriver(subs, mailbox, entry=0, clock=lambda: 0.0, memory=memory)


def test_a_request_arriving_with_a_step_reply_is_admitted():
    mailbox = ScriptedMailbox([new_request("a")], with_reply=[[new_request("b")]])
    lockstep = driver(mailbox)
    lockstep.run_round()  # steps "a"; "b" arrives in the same batch as that step's reply
    lockstep.run_round()
    stepped = [[item[0] for item in msg.items] for dest, msg in mailbox.sent if isinstance(msg, StepCall)]
    assert stepped[0] == ["a"]
    assert "b" in stepped[1]  # admitted and stepped, not dropped with the rest of the reply's batch
    assert all(dest == engine_proc(0) for dest, msg in mailbox.sent if isinstance(msg, StepCall))


def test_the_first_step_is_accounted_against_the_budget_its_engine_reported():
    mailbox = ScriptedMailbox([new_request("a")], with_reply=[])
    budgets: list[KVBudget | None] = []

    def memory(model: int, budget: KVBudget | None) -> KVMemory | None:
        budgets.append(budget)
        return KVMemory(budget) if budget is not None else None

    lockstep = driver(mailbox, memory)
    lockstep.run_round()  # the request arrives, the engines are asked, then "a" steps
    calls = [(dest, [item[0] for item in msg.items]) for dest, msg in mailbox.sent if isinstance(msg, StepCall)]
    assert calls == [(engine_proc(0), []), (engine_proc(1), []), (engine_proc(0), ["a"])]
    assert budgets == [KVBudget(4, 16, None), KVBudget(4, 16, None)]
    entry = lockstep.subs[0].memory
    assert entry is not None and entry.ledger.blocks_of("a") == 1  # 3 prompt tokens + 1 written: one block of 16
