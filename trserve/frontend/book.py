"""The front end's request book-keeping: admission, dispatch to the entry model, reassembly of committed tokens
from whichever model sent them, aborts on every model, and the system-wide active-request count.

Everything here runs on one asyncio loop, so the active count has a single writer and needs no lock; it reaches
the subservers in messages (:mod:`trserve.frontend.counts`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from trcore import PeerReq, RequestSpec
from trserve.frontend.counts import CountPublisher
from trserve.frontend.generation import Failure, Generation, Overloaded, Unavailable
from trserve.frontend.inbound import Inbound
from trserve.frontend.kv_gate import KVGate
from trserve.frontend.metrics import Metrics
from trserve.frontend.pinning import Pinning
from trserve.frontend.probes import Prober
from trserve.frontend.tuner import Tuner
from trserve.runtime.messages import Abort, Ready, State, Thresholds
from trserve.runtime.transport import CurveKeys
from trserve.runtime.unix_async import open_async_mailbox


class FrontEnd(Inbound):
    """Admits requests, talks to the subserver processes over ZeroMQ and tracks every request to its end.

    Its inbox binds ``inbox_address`` (``keys``: CURVE on tcp); ``inboxes[p]`` is the address of process ``p``
    when known (a worker being started is connected when its ``Ready`` names its inbox; for the routed mode,
    process ``m`` serves model ``m``);
    ``entry`` is the process that receives new requests. With replicas (``pinning``), ``entry`` is the entry
    model, and each request goes to the process of its pinned replica of it. Processes ``0 .. num_subservers - 1``
    are subservers, sent the count their threshold tables key on (:meth:`process_counts`; 0: none, the baselines'
    workers keep no threshold table). ``kv_admission``: hold requests while the entry model's core keeps a new
    one waiting for KV (:mod:`trserve.frontend.kv_gate`)."""

    def __init__(
        self,
        inbox_address: str,
        inboxes: dict[int, str],
        entry: int,
        num_models: int,
        num_subservers: int,
        metrics: Metrics,
        max_active: int,
        max_waiting: int | None,
        keys: CurveKeys | None = None,
        pinning: Pinning | None = None,
        kv_admission: bool = False,
    ) -> None:
        self.entry = entry
        self.pinning = pinning
        self.num_models = num_models
        self.metrics = metrics
        self.max_active = max_active
        self.max_waiting = max_waiting
        self.generations: dict[str, Generation] = {}
        self.waiting: deque[Generation] = deque()
        self.num_active = 0
        self.down: dict[int, str] = {}
        #: Processes in ``down`` that are restarting (requests wait for them, see :mod:`trserve.frontend.recovery`).
        self.restarting: set[int] = set()
        #: Lockstep and per-token: the entry model, process ``entry`` being a driver or dispatcher for every model (a
        #: resumed request goes to it, naming the model that continues it); None: ``entry`` serves the entry model.
        self.driven_entry: int | None = None
        self.ready_waiters: dict[int, asyncio.Future[Ready]] = {}
        self.on_ready: Callable[[Ready], None] | None = None
        #: Tokens of KV each process's cache holds, as its ``Ready`` said (absent or 0: not enforced).
        self.kv_capacity: dict[int, int] = {}
        procs = [entry] if pinning is None else list(pinning.table.procs_of(entry))
        self.kv_gate = KVGate(procs, kv_admission)
        self.mailbox = open_async_mailbox(inbox_address, inboxes, keys)
        self.counts = CountPublisher(num_subservers, self.mailbox)
        self.prober = Prober(self.mailbox.send)  # not self.send: no reference cycle back to the front end
        #: ``thresholds: adaptive``: the controller fed by step reports (:mod:`trserve.frontend.tuner`).
        self.tuner: Tuner | None = None
        #: The threshold vector in force without a tuner: the run spec's, or one set by ``PUT /admin/thresholds``.
        self.thresholds: tuple[int, ...] | None = None
        self.thresholds_set = False  # whether ``PUT /admin/thresholds`` replaced the run spec's
        self._receiver: asyncio.Task[None] | None = None

    # -- wiring -----------------------------------------------------------------------------------------------

    def connect(self, proc: int, address: str) -> None:
        """(Re)connect the outbox of process ``proc``; anything queued for a previous incarnation is dropped,
        anything sent since :meth:`disconnect` goes now."""
        self.mailbox.rewire(proc, address)
        self.counts.connected_to(proc)
        self.publish_counts()
        vector = self.tuner.thresholds if self.tuner is not None else self.thresholds if self.thresholds_set else None
        if vector is not None:  # a (re)started worker starts from the run spec's thresholds: send those in force
            self.send(proc, Thresholds(vector))

    def disconnect(self, proc: int) -> None:
        """Process ``proc`` is (re)starting: drop what was queued for it; hold later messages until it reports
        its address in ``Ready``."""
        self.mailbox.disconnect(proc)

    def send(self, proc: int, message: Any) -> None:
        self.mailbox.send(proc, message)

    def broadcast(self, message: Any) -> None:
        for proc in self.mailbox.destinations:
            if proc not in self.down:
                self.send(proc, message)

    def set_thresholds(self, vector: tuple[int, ...]) -> None:
        """Put ``vector`` in force on every subserver (one :class:`Thresholds` message each, applied at its next
        launch; tables keyed by active count are dropped), and on any that (re)starts later."""
        self.thresholds, self.thresholds_set = vector, True
        self.broadcast(Thresholds(vector))

    def start(self) -> None:
        self._receiver = asyncio.get_running_loop().create_task(self._receive_forever())

    async def close(self) -> None:
        if self.tuner is not None:
            self.tuner.stop()
        if self._receiver is not None:
            self._receiver.cancel()
        self.mailbox.close()

    # -- admission --------------------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, prompt_token_ids: list[int], extra: Mapping[str, Any]) -> Generation:
        """Admit a request (dispatched now or queued); raises :class:`Overloaded` or :class:`Unavailable`."""
        if set(self.down) - self.restarting:
            raise Unavailable(f"the server is not serving: {self.why_down()}", retry_after_s=5)
        gen = Generation(spec, prompt_token_ids, extra, last_progress=time.monotonic())
        if self.down or self.waiting or not self._has_room():  # while a model restarts, requests wait for it
            if self.max_waiting is not None and len(self.waiting) >= self.max_waiting:
                self.metrics.requests.labels("rejected").inc()
                if self.down:
                    raise Unavailable(f"the server is restarting: {self.why_down()}", retry_after_s=5)
                raise Overloaded(f"{len(self.waiting)} requests are already waiting (limit {self.max_waiting})")
            self.waiting.append(gen)
        else:
            self._dispatch(gen)
        self.generations[spec.request_id] = gen
        self.publish_counts()
        return gen

    def _dispatch(self, gen: Generation) -> None:
        extra = dict(gen.extra) if self.pinning is None else self.pinning.pin(gen)
        msg = PeerReq(
            request_id=gen.request_id,
            start=0,
            token_ids=tuple(gen.prompt_token_ids),
            anchors=(0,) * self.num_models,
            origin=-1,
            spec=gen.spec,
            extra=extra,
        )
        gen.is_dispatched = True
        gen.last_progress = time.monotonic()
        self.num_active += 1
        self.kv_gate.on_dispatch()
        self.send(self.entry if self.pinning is None else self.pinning.process(gen, self.entry), msg)

    def _has_room(self) -> bool:
        return self.num_active < self.max_active and not self.kv_gate.holds(self.num_active)

    def dispatch_waiting(self) -> None:
        """Dispatch queued requests while there is room (slots, and KV by ``kv_admission``) and every model is up."""
        while self.waiting and not self.down and self._has_room():
            self._dispatch(self.waiting.popleft())

    def finish(self, gen: Generation, reason: str) -> None:
        """End a request whose output is complete."""
        self._end(gen, ("done", reason), "finished")

    def _end(self, gen: Generation, event: tuple[str, Any], outcome: str) -> None:
        if gen.is_done:
            return
        gen.is_done = True
        self.generations.pop(gen.request_id, None)
        if gen.is_dispatched:
            self.num_active -= 1
        else:
            self.waiting.remove(gen)
        if self.pinning is not None:
            self.pinning.unpin(gen)
        gen.events.put_nowait(event)
        self.metrics.requests.labels(outcome).inc()
        self.kv_gate.on_end(self.num_active)
        if outcome == "finished":
            self.metrics.e2e_seconds.observe(time.monotonic() - gen.spec.arrival_time)
        self.dispatch_waiting()
        self.publish_counts()

    def publish_counts(self) -> None:
        """The counts changed: the subservers hear of it once this event-loop turn is over."""
        if self.counts.mark():
            asyncio.get_running_loop().call_soon(self._send_counts)
        self.metrics.active.set(self.num_active)
        self.metrics.waiting.set(len(self.waiting))

    def _send_counts(self) -> None:
        self.counts.flush(self.process_counts())

    def process_counts(self) -> list[int]:
        """The count each subserver process's threshold table keys on: every active request, or with replicas the
        requests pinned to that process."""
        if self.pinning is not None:
            return list(self.pinning.pinned)
        return [self.num_active] * self.counts.num_procs

    def abort(self, request_id: str, reason: str = "aborted") -> None:
        """The client went away or a stop string matched: drop the request on every model."""
        gen = self.generations.get(request_id)
        if gen is None:
            return
        if gen.is_dispatched:
            self.broadcast(Abort(request_id, gen.incarnation))
        self._end(gen, ("done", reason), "aborted" if reason == "aborted" else "finished")

    def fail(self, gen: Generation, failure: Failure, outcome: str = "failed") -> None:
        """End one request with an error (the HTTP layer answers ``failure.status``) and drop it everywhere."""
        if gen.is_dispatched:
            self.broadcast(Abort(gen.request_id, gen.incarnation))
        self._end(gen, ("error", failure), outcome)

    def fail_all(self, message: str) -> None:
        """A model died for good: every request in flight or waiting ends with ``message`` (HTTP 503)."""
        for gen in list(self.generations.values()):
            self.fail(gen, Failure(503, message))

    def why_down(self) -> str:
        return "; ".join(self.down.values())

    # -- probes -----------------------------------------------------------------------------------------------

    async def probe(self, timeout_s: float = 5.0, detail: bool = False) -> list[State]:
        """Ask every live process for its state (resident requests, KV usage, memory)."""
        live = [p for p in self.mailbox.destinations if p not in self.down]
        return await self.prober.ask(live, timeout_s, detail)
