"""Admission by KV headroom (``server.kv_admission``): while the entry model's core reports a new request waiting
for memory, further requests stay in the front end's queue; each end lets one through; the next report decides.
The front end here is the real one, wired over ZeroMQ to in-test inboxes (``test_counts.Processes``); what the
entry process receives is read off the wire."""

from __future__ import annotations

import asyncio

import pytest

from trcore import PeerReq
from trcore.replicas import ReplicaTable
from trserve.frontend.generation import Overloaded
from trserve.frontend.kv_gate import KVGate
from trserve.runtime.messages import StepReport

from ..runtime.test_transport import receive
from .test_counts import Processes


def memory(waiting: int) -> dict[str, int]:
    counters = {"spilled": 0, "preempted": 0, "recomputed_tokens": 0, "admission_waits": waiting}
    return {"blocks_total": 10, "block_size": 16, "blocks_used": 10, "blocks_parked": 0, **counters,
            "waiting_admission": waiting}  # fmt: skip


def test_the_gate_holds_only_while_every_entry_process_reports_a_waiter_and_something_is_in_flight():
    gate = KVGate([0, 1])
    assert not gate.holds(num_active=5)  # no report yet
    gate.on_report(0, memory(1))
    assert not gate.holds(5)  # replica 1 has room
    gate.on_report(1, memory(2))
    gate.on_report(2, memory(7))  # not an entry process: ignored
    assert gate.holds(5) and not gate.holds(0)  # nothing in flight: no report would ever release it
    gate.forget(1)  # replica 1 restarts: its waiters are gone
    assert not gate.holds(5)


def test_each_end_lets_one_held_request_through_until_the_next_report():
    gate = KVGate([0])
    gate.on_report(0, memory(1))
    gate.on_end()
    gate.on_end()  # ends between two reports do not add up: the next report says whether more fit
    assert [gate.holds(3) for _ in range(3)] == [False, True, True]
    gate.on_end()
    gate.on_report(0, memory(1))  # a report after the end: it already counts what the end freed
    assert gate.holds(3)
    gate.on_report(0, memory(0))
    assert not gate.holds(3) and gate.state()["passed_on_end"] == 1


def test_once_nothing_is_in_flight_the_waiters_of_the_last_reports_are_forgotten():
    gate = KVGate([0, 1])
    gate.on_dispatch()
    gate.on_report(0, memory(4))  # then the four waiting on each replica were cancelled: no step, no report
    gate.on_report(1, memory(6))
    gate.on_end(num_active=2)
    assert gate.state()["waiting_for_kv"] == {"0": 4, "1": 6}  # others are in flight: a report will follow
    gate.on_end(num_active=0)
    gate.on_report(1, memory(5))  # sent before the cancellations reached replica 1
    assert gate.state()["waiting_for_kv"] == {"0": 0, "1": 0}
    gate.on_dispatch()
    assert [gate.holds(1), gate.holds(2)] == [False, False]  # the next burst is not held behind them
    gate.on_report(0, memory(1))
    gate.on_report(1, memory(2))
    assert gate.holds(2)  # reports after a dispatch count again


def test_disabled_or_without_kv_accounting_it_never_holds():
    off = KVGate([0], enabled=False)
    off.on_report(0, memory(3))
    assert not off.holds(4)
    plain = KVGate([0])
    plain.on_report(0, {})  # memory.policy: off: reports carry no memory fields
    assert not plain.holds(4)


def test_kv_admission_is_off_by_default_and_can_be_turned_on():
    from trserve.config import ServerConfig

    assert not ServerConfig().kv_admission
    assert ServerConfig.model_validate({"kv_admission": True}).kv_admission
    with pytest.raises(ValueError, match="kv_admission"):
        ServerConfig.model_validate({"kv_admission": "sometimes"})


def test_the_front_end_holds_requests_behind_a_waiter_and_releases_them_in_order(tmp_path):
    async def scenario() -> None:
        async with Processes(tmp_path, ReplicaTable((1, 1))) as procs:
            procs.fe.kv_gate.enabled = True
            fe = procs.fe
            for i in range(3):
                procs.submit(f"r{i}")
            fe.handle(StepReport(0, 2, 2, 0.01, 1, 3, 0, 0.5, memory=memory(1)))  # r2 waits for KV on model 0
            for i in range(3, 6):
                procs.submit(f"r{i}")
            assert fe.num_active == 3 and [g.request_id for g in fe.waiting] == ["r3", "r4", "r5"]
            procs.finish("r0")  # one end: one held request goes (the report said nothing new about memory)
            assert fe.num_active == 3 and [g.request_id for g in fe.waiting] == ["r4", "r5"]
            fe.handle(StepReport(0, 2, 2, 0.01, 1, 3, 0, 0.5, memory=memory(1)))
            assert [g.request_id for g in fe.waiting] == ["r4", "r5"]
            fe.handle(StepReport(0, 2, 2, 0.01, 0, 3, 0, 0.5, memory=memory(0)))  # room: the rest go, in order
            assert fe.num_active == 5 and not fe.waiting
            await asyncio.sleep(0)
            received = receive(procs.boxes[0], 6, kind=PeerReq)  # a loaded machine delivers late, in order
            assert [m.request_id for m in received] == [f"r{i}" for i in range(6)]

    asyncio.run(scenario())


def test_a_full_front_end_queue_refuses_while_the_gate_holds(tmp_path):
    async def scenario() -> None:
        procs = Processes(tmp_path, ReplicaTable((1, 1)))
        fe = procs.fe
        fe.kv_gate.enabled = True
        fe.max_waiting = 1
        procs.submit("r0")
        fe.handle(StepReport(0, 1, 1, 0.01, 1, 1, 0, 0.5, memory=memory(1)))
        procs.submit("r1")  # held
        with pytest.raises(Overloaded, match="already waiting"):  # the HTTP layer answers 429, Retry-After
            procs.submit("r2")
        await procs.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("changes", "why"),
    [({"mode": "lockstep"}, "mode 'lockstep'"), ({"memory": {"policy": "off"}}, "memory.policy 'off'")],
)  # fmt: skip
def test_kv_admission_where_it_would_do_nothing_is_refused_naming_why(changes, why):
    from trserve.config import ServeConfig

    models = [{"name": "small", "path": "x"}, {"name": "large", "path": "y"}]
    with pytest.raises(ValueError, match=f"server.kv_admission needs mode 'routed'.*{why}"):
        ServeConfig.model_validate({"models": models, "server": {"kv_admission": True}, **changes})
    assert ServeConfig.model_validate({"models": models, **changes}).server.kv_admission is False


def test_by_default_the_front_end_queues_every_request_as_vllm_does(tmp_path):
    from trserve.config import ServerConfig

    assert ServerConfig().max_waiting_requests is None

    async def scenario() -> None:
        procs = Processes(tmp_path, ReplicaTable((1, 1)))
        fe = procs.fe
        fe.max_active, fe.max_waiting = 1, ServerConfig().max_waiting_requests
        for i in range(1000):
            procs.submit(f"r{i}")
        assert fe.num_active == 1 and len(fe.waiting) == 999
        await procs.close()

    asyncio.run(scenario())
