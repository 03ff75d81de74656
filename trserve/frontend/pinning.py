"""The front end's side of replicas: pin each request to one replica of every model when it is dispatched, and
count each replica's pinned requests (its threshold table's key, sent to it by :mod:`trserve.frontend.counts`).

Pins are chosen at dispatch, for every model at once, so a hand-off always goes straight from one subserver to
the pinned replica of its destination (the pins travel in the request's routing state,
``extra[trcore.replicas.PIN_KEY]``) and the front end stays the only writer of the counts. A replica's load is
its queue (``num_ready`` of its latest step report) plus the active requests pinned to it (resident there, or
pinned and not there yet: counting those keeps a burst of admissions from all picking the same replica of a model
they have not reached). A replica already holding its ``max_num_seqs`` pinned requests takes no more (so
``server.max_active_requests`` may reach the sum of a model's replicas' ``max_num_seqs``). The simulator applies
the same rule (``trsim.driver``; it models no ``max_num_seqs``, so every replica has room there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trcore import PeerReq
from trcore.replicas import PIN_KEY, ReplicaTable
from trserve.frontend.generation import Generation
from trserve.runtime.messages import StepReport


class Pinning:
    """Pins, per-process pinned counts (``pinned[p]``: the count process ``p``'s threshold table keys on) and
    queues for a run with replicas."""

    def __init__(self, table: ReplicaTable, caps: Sequence[int] | None = None) -> None:
        """``caps[p]``: the most requests process ``p`` may hold pinned (its engine's ``max_num_seqs``); None: no
        bound."""
        self.table = table
        self.caps = None if caps is None else list(caps)
        self.pinned = [0] * table.num_procs
        self.queued = [0] * table.num_procs

    def loads(self) -> list[int]:
        """Each process's load: queue plus pinned requests."""
        return [q + n for q, n in zip(self.queued, self.pinned, strict=True)]

    def pin(self, gen: Generation) -> dict[str, object]:
        """Pin ``gen`` to the least-loaded replica of every model; returns its routing extra with the pins."""
        self.unpin(gen)
        room = None if self.caps is None else [n < cap for n, cap in zip(self.pinned, self.caps, strict=True)]
        pins = self.table.pin(self.loads(), room)
        gen.pins = pins
        for model, replica in enumerate(pins):
            self.pinned[self.table.proc(model, replica)] += 1
        return {**gen.extra, PIN_KEY: list(pins)}

    def repin(self, gen: Generation, msg: PeerReq) -> PeerReq:
        """``msg`` (a resumed incarnation of ``gen``) with fresh pins."""
        extra = self.pin(gen)
        return replace(msg, extra={**msg.extra, PIN_KEY: extra[PIN_KEY]})

    def unpin(self, gen: Generation) -> None:
        """``gen`` ended (or is pinned afresh): its replicas no longer count it."""
        if gen.pins is None:
            return
        for model, replica in enumerate(gen.pins):
            self.pinned[self.table.proc(model, replica)] -= 1
        gen.pins = None

    def process(self, gen: Generation, model: int) -> int:
        """The process of ``gen``'s pinned replica of ``model``."""
        assert gen.pins is not None, "a dispatched request has pins"
        return self.table.proc(model, gen.pins[model])

    def holds(self, gen: Generation, proc: int) -> bool:
        """Whether ``gen`` is pinned to process ``proc`` (its KV may live there)."""
        model, replica = self.table.procs[proc]
        return gen.pins is not None and gen.pins[model] == replica

    def on_report(self, report: StepReport) -> None:
        self.queued[self.table.proc(report.model, report.replica)] = report.num_ready

    def forget_queue(self, proc: int) -> None:
        """Process ``proc`` died: its queue is gone with it."""
        self.queued[proc] = 0
