"""One subserver's event loop: drives a ``trcore.Subserver`` with the real clock and a step engine.

The loop owns no scheduling logic: it feeds messages to ``receive``, asks ``launch`` whether to step, turns a
launched batch into one engine step, and hands the result to ``complete``. Hand-offs leave through the mailbox
without waiting for the peer, so this model goes straight on with its other requests."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, cast

from trcore import Batch, PeerReq, ProgramError, Subserver
from trcore.adaptive import policy_for_vector
from trcore.replicas import ReplicaTable
from trserve.engine.types import Engine, EngineStepError, OverlappingEngine, StepItem, TokenOut
from trserve.runtime.messages import (
    Abort,
    Active,
    Failed,
    Finished,
    Handoffs,
    Probe,
    Rewire,
    Shutdown,
    State,
    Thresholds,
    incarnation_of,
)
from trserve.runtime.reports import (
    LoopStats,
    emulated_fields,
    failure_report,
    loop_state,
    memory_fields,
    split_handoffs,
    step_outcome,
    step_report,
    step_result,
    unservable_failures,
)
from trserve.runtime.transport import FRONTEND

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0  #: How long an idle loop sleeps between checks that its parent is alive.
TOMBSTONE_S = 600.0  #: How long a request id stays remembered after an abort, so late hand-offs for it are dropped.


class Outbox(Protocol):
    def send(self, dest: int, message: Any) -> None: ...
    def receive_all(self, timeout_s: float | None) -> list[Any]: ...
    def rewire(self, dest: int, address: str) -> None: ...


class SubserverLoop:
    """Runs one model: ``run()`` returns after a :class:`Shutdown` message or when the parent process dies.

    The count its threshold table keys on arrives in :class:`Active` messages (0 until the first). A step that raises
    :class:`~trserve.engine.types.EngineStepError` fails the requests the engine names as its culprits (the others
    are stepped again without them), or the whole batch when it names none; a routing program that breaks on a
    step (:class:`~trcore.errors.ProgramError`) fails that step's requests; any other exception ends the process.

    With replicas (``table``), this loop runs replica ``replica`` of its model, and a hand-off to model ``m`` goes to
    the process of the request's pinned replica of ``m`` (``Request.extra[trcore.replicas.PIN_KEY]``)."""

    def __init__(
        self,
        sub: Subserver,
        engine: Engine,
        mailbox: Outbox,
        clock: Callable[[], float] = time.monotonic,
        idle_poll_s: float = IDLE_POLL_S,
        table: ReplicaTable | None = None,
        replica: int = 0,
    ) -> None:
        self.sub = sub
        sub.num_active = 0  # until the front end's first Active
        self.table = table if table is not None and table.has_replicas else None
        self.replica = replica
        self.engine = engine
        self.mailbox = mailbox
        self.clock = clock
        self.idle_poll_s = idle_poll_s
        self.stats = LoopStats()
        self.is_stopping = False
        self._tombstones: dict[str, tuple[float, int]] = {}  # request id -> (when, incarnation) aborted
        self._parent = os.getppid()
        self.overlaps = isinstance(engine, OverlappingEngine) and engine.overlaps
        self._pending: Callable[[], None] | None = None  # the last step's report, when not sent yet
        self._free_at: float | None = None  # when the previous step ended (perf_counter), None after idling

    @property
    def model(self) -> int:
        return self.sub.model

    def run(self) -> None:
        while not self.is_stopping:
            self.run_once()
        self._publish_pending()

    def run_once(self) -> None:
        """Handle what arrived, then launch a step if the policy allows, else wait for a message or deadline."""
        self._handle_all(self.mailbox.receive_all(0))
        batch = self.sub.launch(self.clock())
        self._fail_unservable()
        if batch is not None:
            self.stats.launched()
            self._step(batch)
            self.stats.stepped()
            return
        self._publish_pending()  # nothing to overlap it with
        self._free_at = None  # the next step's host gap is not measured after an idle loop
        self._handle_all(self.mailbox.receive_all(self._wait_timeout()))
        if self.sub.num_ready == 0 and os.getppid() != self._parent:
            log.warning("model %d: parent process exited; stopping", self.model)
            self.is_stopping = True

    def _wait_timeout(self) -> float:
        """Until the queue's max-wait deadline, if any: anything else that can launch it arrives as a message."""
        deadline = self.sub.next_deadline() if self.sub.num_ready else None
        if deadline is None:
            return self.idle_poll_s
        return min(self.idle_poll_s, max(0.0, deadline - self.clock()))

    # -- messages ---------------------------------------------------------------------------------------------

    def _handle_all(self, messages: Sequence[Any]) -> None:
        for msg in messages:
            self._handle(msg)

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, PeerReq):
            self._receive(msg)
        elif isinstance(msg, Handoffs):
            self.stats.received(msg)
            for req in msg.requests:
                self._receive(req)
        elif isinstance(msg, Active):
            self.sub.num_active = msg.count
        elif isinstance(msg, Thresholds):
            self.sub.policy = policy_for_vector(self.sub.policy, msg.vector, self.sub.model)
        elif isinstance(msg, Abort):
            self._forget(msg.request_id, msg.incarnation)
        elif isinstance(msg, Probe):
            self.mailbox.send(FRONTEND, self.state(msg.token, msg.detail))
        elif isinstance(msg, Rewire):
            self.mailbox.rewire(msg.model, msg.address)
        elif isinstance(msg, Shutdown):
            self.is_stopping = True
        else:
            log.error("model %d: unknown message %r", self.model, type(msg).__name__)

    def _receive(self, msg: PeerReq) -> None:
        rid, incarnation = msg.request_id, incarnation_of(msg.extra)
        if msg.is_finished:  # released by the model that finished it (a release carries no routing extra)
            self._forget(rid)
            return
        tombstone = self._tombstones.get(rid)
        if tombstone is not None and incarnation <= tombstone[1]:
            return  # aborted while this hand-off was in flight
        held = self.sub.requests.get(rid)
        if held is not None and incarnation > incarnation_of(held.extra):
            self._forget(rid)  # a request resumed after a crash: what this model held of it is stale
        if msg.spec is None and rid not in self.sub.requests:  # for an earlier incarnation: the front end resumes it
            log.warning("model %d: dropping hand-off for unknown request %s", self.model, rid)
            return
        self.sub.receive(msg, self.clock())

    def _forget(self, request_id: str, incarnation: int | None = None) -> None:
        """Release a request here (finished elsewhere or aborted), free its KV in the engine, and drop its later
        hand-offs of ``incarnation`` (at least the one held here) or earlier."""
        held = self.sub.requests.get(request_id)
        incarnation = max(incarnation or 0, incarnation_of(held.extra) if held is not None else 0)
        self.sub.abort(request_id)
        self.engine.release(request_id)
        now = self.clock()
        _, before = self._tombstones.get(request_id, (now, 0))
        self._tombstones[request_id] = (now, max(incarnation, before))
        if len(self._tombstones) > 4096:
            self._tombstones = {r: t for r, t in self._tombstones.items() if now - t[0] < TOMBSTONE_S}

    # -- one step ---------------------------------------------------------------------------------------------

    def _step(self, batch: Batch) -> None:
        for rid in batch.evicted:  # spilled or preempted by the core: their blocks go before the step takes them
            self.engine.release(rid)
        items = [
            StepItem(r.request_id, r.token_ids[len(r.token_ids) - n :], r.spec.sampling)
            for r, n in zip(batch.requests, batch.num_new_tokens, strict=True)
        ]
        outputs_before = [r.num_output_tokens for r in batch.requests]
        started = time.perf_counter()
        host_gap_s = None if self._free_at is None else started - self._free_at
        outs, failed = self._step_isolated(items)
        if not outs:  # nothing of the batch could run; keep serving the rest
            self._fail_batch(batch, failed)
            return
        self._free_at = time.perf_counter()
        step_s = self._free_at - started
        try:
            handoffs = self.sub.complete(batch, step_result(batch, outs), self.clock())
        except ProgramError as exc:  # a bug of the routing program: its step's requests fail, the model goes on
            return self._fail_batch(batch, failed, str(exc))
        if failed:
            handoffs = [(dest, msg) for dest, msg in handoffs if msg.request_id not in failed]
            for rid in failed:
                self._forget(rid)
        self.stats.num_steps += 1
        counts = {"num_ready": self.sub.num_ready, "num_resident": len(self.sub.requests), "replica": self.replica,
                  "step_s": step_s, "host_gap_s": host_gap_s, "memory": memory_fields(self.sub.memory),
                  **emulated_fields(self.engine)}  # fmt: skip
        finished, counts["num_handoffs"] = self._hand_off(batch, handoffs)  # at once: a peer may be waiting
        outcome = step_outcome(batch, outputs_before, handoffs, finished, failed, self.sub.program.moving_extra)
        self._pending = partial(self._report, outcome, counts)
        if not self.overlaps:
            self._publish_pending()

    def _step_isolated(self, items: list[StepItem]) -> tuple[dict[str, TokenOut], dict[str, str]]:
        """Step ``items``; when the engine names the requests that broke the step, drop them and step the others
        again. Returns outputs and failure messages by request id (all fail when the engine cannot tell)."""
        failed: dict[str, str] = {}
        while items:
            try:
                outs = self._run_engine(items)
            except EngineStepError as exc:
                ids = {item.request_id for item in items}
                culprits = {r: why for r, why in exc.culprits.items() if r in ids} or dict.fromkeys(ids, str(exc))
                prefix = f"model {self.model} could not step the request"
                failed.update({r: f"{prefix}: {why}" for r, why in culprits.items()})
                items = [item for item in items if item.request_id not in culprits]
                continue
            return {item.request_id: out for item, out in zip(items, outs, strict=True)}, failed
        return {}, failed

    def _run_engine(self, items: list[StepItem]) -> list[TokenOut]:
        """One engine step; an overlapping engine runs it while the loop sends the previous step's report."""
        if not self.overlaps:
            return self.engine.step(items)
        engine = cast(OverlappingEngine, self.engine)
        engine.start(items)
        self._publish_pending()
        return engine.finish()

    def _publish_pending(self) -> None:
        """Send the last step's report (:meth:`_report`) if it has not gone yet."""
        if self._pending is not None:
            publish, self._pending = self._pending, None
            publish()

    def _report(self, outcome: dict[str, Any], counts: dict[str, Any]) -> None:
        """Send a completed step's report (its ``outcome`` and the loop's ``counts`` as they were when it completed;
        with an overlapping engine this runs while the next step does)."""
        counts = {**counts, "kv_usage": self.engine.kv_usage()}
        self.mailbox.send(FRONTEND, step_report(outcome, counts, self.stats))

    def _hand_off(self, batch: Batch, handoffs: list[tuple[int, PeerReq]]) -> tuple[list[Finished], int]:
        """Send the step's hand-offs (one message per destination process), release the finished requests' KV;
        returns the finished requests' messages and the number of hand-offs that moved a live request."""
        finished, outgoing, num_handoffs = split_handoffs(batch, handoffs, self._process_of)
        for done in finished:
            self.engine.release(done.request_id)
        for proc, msgs in outgoing.items():
            self.mailbox.send(proc, Handoffs(tuple(msgs), sent_at=time.time()))
        self.stats.num_handoffs += num_handoffs
        return finished, num_handoffs

    def _process_of(self, model: int, msg: PeerReq, batch: Batch) -> int:
        """The process of the request's pinned replica of ``model`` (a release carries no routing extra: the
        request's own record in ``batch`` has its pins); ``model`` itself without replicas."""
        if self.table is None:
            return model
        extra = msg.extra or next(r.extra for r in batch.requests if r.request_id == msg.request_id)
        return self.table.proc_of_request(model, extra)

    def _fail_unservable(self) -> None:
        """Report the requests the core found too large for this model's whole KV cache (admission refuses most)."""
        if unservable := self.sub.take_unservable():
            self._publish_pending()
            for req in unservable:
                self._forget(req.request_id)
            failed = unservable_failures(self.sub, unservable)
            self.mailbox.send(FRONTEND, failure_report(self.sub, failed, 0, self.engine.kv_usage(), self.replica))

    def _fail_batch(self, batch: Batch, messages: dict[str, str], why: str | None = None) -> None:
        self._publish_pending()  # the previous step goes first
        why = why or f"model {self.model} failed"
        for req in batch.requests:
            self._forget(req.request_id)
        failed = [Failed(r.request_id, messages.get(r.request_id, why)) for r in batch.requests]
        self.sub.fail(batch)  # the batch will never complete; its requests are gone
        self.mailbox.send(FRONTEND, failure_report(self.sub, failed, batch.size, self.engine.kv_usage(), self.replica))

    def state(self, token: int, detail: bool = False) -> State:
        """This model's resident requests, KV usage and resident memory (``detail``: live Python objects too)."""
        received = dict(getattr(self.mailbox, "counts", {}))
        return loop_state(self.sub, self.engine, self.stats.num_steps, received, self.replica, token, detail)
