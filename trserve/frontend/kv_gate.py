"""Admission by KV headroom (``server.kv_admission``): the front end holds new requests in its own queue while the
entry model's core keeps a new request waiting for memory.

Whether a new request waits for blocks or spills parked sessions to get in is decided once, in the core, by the
spill policy's cost model (:mod:`trcore.kvplan`); each step report says how many new requests wait there now
(``memory["waiting_admission"]``). While one does, a further request could only queue behind it, so the front
end keeps it instead: it stays cancellable at no cost, counts against ``max_waiting_requests`` (so a flood is
answered 429 with Retry-After instead of piling up), and the active count that threshold tables key on stays
the requests being served. Each request that ends lets one held request through (memory may have come free);
the next report of the entry model says whether more may follow.

With replicas of the entry model, requests are held only while every replica has a request waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class KVGate:
    """Which entry processes report new requests waiting for KV, and whether the front end holds requests now."""

    def __init__(self, entry_procs: Sequence[int], enabled: bool = True) -> None:
        self.entry_procs = tuple(entry_procs)
        self.enabled = enabled
        self.waiting: dict[int, int] = {}
        #: Requests let through by an end while the gate held (at most one per end).
        self.num_passed = 0
        self._pass = 0
        self._idle = False  # set once the last request in flight ended: a report then tells of cancelled ones

    def on_report(self, proc: int, memory: dict[str, int]) -> None:
        """A step report of process ``proc`` with its core's memory fields (none: no KV accounting)."""
        if proc in self.entry_procs and "waiting_admission" in memory and not self._idle:
            self.waiting[proc] = memory["waiting_admission"]
            self._pass = 0

    def on_dispatch(self) -> None:
        """A request went to the entry model: reports count again."""
        self._idle = False

    def on_end(self, num_active: int = 1) -> None:
        """A request ended: its KV is free on every model, so one held request may try. With ``num_active`` 0
        nothing is in flight, so nothing waits for KV either: the waiters of the last reports (requests cancelled
        while they waited, after which the model steps no more and sends no report) are forgotten, and so are
        reports until the next dispatch (sent before the cancellations reached the model)."""
        self._pass = 1
        if num_active == 0:
            self.waiting.clear()
            self._idle = True

    def forget(self, proc: int) -> None:
        """Process ``proc`` is gone or restarting: its waiting requests went with it."""
        self.waiting.pop(proc, None)

    def holds(self, num_active: int) -> bool:
        """Whether to keep the next request in the front end's queue (never with nothing in flight: no report
        would come to release it)."""
        if not self.enabled or num_active == 0:
            return False
        blocked = all(self.waiting.get(p, 0) > 0 for p in self.entry_procs)
        if blocked and self._pass:
            self._pass -= 1
            self.num_passed += 1
            return False
        return blocked

    def state(self) -> dict[str, Any]:
        """What ``/debug/state`` shows."""
        return {
            "enabled": self.enabled,
            "waiting_for_kv": {str(p): self.waiting.get(p, 0) for p in self.entry_procs},
            "passed_on_end": self.num_passed,
        }
