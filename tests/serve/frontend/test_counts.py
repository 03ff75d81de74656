"""The front end sends each subserver process the count its threshold table keys on, over ZeroMQ: at most one
:class:`Active` per process per event-loop turn, none while the count stays put, the current one again when a
process reconnects. The expected counts come from the test's own book: requests admitted minus requests finished
(with replicas: of those, the ones whose pins, read off the wire, name that process)."""

from __future__ import annotations

import asyncio
from typing import Any

from trcore import PeerReq, RequestSpec
from trcore.replicas import PIN_KEY, ReplicaTable
from trserve.frontend.book import FrontEnd
from trserve.frontend.metrics import Metrics
from trserve.frontend.pinning import Pinning
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.messages import Active, Finished, StepReport
from trserve.runtime.transport import FRONTEND, Mailbox


class Processes:
    """A front end wired to ``num_procs`` in-test subserver inboxes over real ZeroMQ sockets."""

    def __init__(self, tmp_path: Any, table: ReplicaTable, num_subservers: int | None = None) -> None:
        ep = Endpoints(str(tmp_path), table.num_procs)
        book = ep.address_book()
        self.boxes = [Mailbox(book[p], {FRONTEND: book[FRONTEND]}) for p in range(table.num_procs)]
        names = [f"m{m}" for m in range(table.num_models)]
        pinning = Pinning(table) if table.has_replicas else None
        inboxes = {p: book[p] for p in range(table.num_procs)}
        subservers = table.num_procs if num_subservers is None else num_subservers
        self.fe = FrontEnd(book[FRONTEND], inboxes, 0, table.num_models, subservers, Metrics(names), 64, 64,
                           pinning=pinning)  # fmt: skip
        self.pins: dict[str, list[int]] = {}  # request id -> its pins, as the entry process received them

    def submit(self, rid: str) -> None:
        self.fe.submit(RequestSpec(rid, 2, 10), [5, 6], {})

    def finish(self, *rids: str) -> None:
        """One step report ends ``rids`` (one token each)."""
        done = [Finished(rid, (9,), "stop") for rid in rids]
        self.fe.handle(StepReport(0, len(rids), len(rids), 0.01, 0, 0, 0, 0.0, finished=done))

    async def counts_received(self) -> list[list[int]]:
        """Let the front end's loop run its flush, then per process the counts it was sent since the last call."""
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        out: list[list[int]] = []
        for box in self.boxes:
            messages = []
            while batch := box.receive_all(0.25):  # generous: a loaded machine delivers late
                messages += batch
            for msg in messages:
                if isinstance(msg, PeerReq):
                    self.pins[msg.request_id] = list(msg.extra.get(PIN_KEY, []))
            out.append([m.count for m in messages if isinstance(m, Active)])
        return out

    async def close(self) -> None:
        await self.fe.close()
        for box in self.boxes:
            box.close()

    async def __aenter__(self) -> Processes:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def test_counts_are_sent_once_per_turn_and_only_when_they_change(tmp_path):
    async def scenario() -> None:
        procs = Processes(tmp_path, ReplicaTable((1, 1)))
        live: set[str] = set()
        for i in range(6):  # one turn: six admissions
            procs.submit(f"r{i}")
            live.add(f"r{i}")
        assert await procs.counts_received() == [[len(live)]] * 2
        procs.finish("r0", "r1")  # one report ends two
        live -= {"r0", "r1"}
        assert await procs.counts_received() == [[len(live)]] * 2
        procs.finish("r2")  # a closed loop: one ends, one is admitted in the same turn
        procs.submit("r6")
        live ^= {"r2", "r6"}
        assert await procs.counts_received() == [[], []]
        procs.fe.disconnect(1)  # process 1 restarts: it gets the current count when it is back
        procs.fe.connect(1, procs.boxes[1].address)
        assert await procs.counts_received() == [[], [len(live)]]
        assert procs.fe.counts.num_sent == 5
        await procs.close()

    asyncio.run(scenario())


def test_with_replicas_each_process_gets_the_requests_pinned_to_it(tmp_path):
    table = ReplicaTable((2, 1))  # model 0: processes 0 and 1; model 1: process 2

    def expected(live: set[str]) -> list[int]:
        return [sum(1 for rid in live if table.proc(p_model, procs.pins[rid][p_model]) == p)
                for p, (p_model, _) in enumerate(table.procs)]  # fmt: skip

    async def scenario() -> None:
        live = {f"r{i}" for i in range(5)}
        for rid in sorted(live):
            procs.submit(rid)
        received = await procs.counts_received()
        assert received == [[n] for n in expected(live)]
        assert expected(live) == [3, 2, 5]  # the burst spread over model 0's replicas
        before = expected(live)
        procs.finish("r0", "r2")
        live -= {"r0", "r2"}
        after = expected(live)
        assert after != before and after[1] == before[1]  # both were pinned to process 0: process 1 hears nothing
        assert await procs.counts_received() == [[n] if n != b else [] for n, b in zip(after, before, strict=True)]
        await procs.close()

    procs = Processes(tmp_path, table)
    asyncio.run(scenario())


def test_a_front_end_without_subservers_sends_no_counts(tmp_path):
    async def scenario() -> None:
        procs = Processes(tmp_path, ReplicaTable((1, 1)), num_subservers=0)  # the baselines' workers
        procs.submit("r0")
        assert await procs.counts_received() == [[], []]
        await procs.close()

    asyncio.run(scenario())
