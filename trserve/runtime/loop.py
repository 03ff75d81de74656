"""One subserver's event loop: drives a ``trcore.Subserver`` with the real clock and a step engine.

The loop owns no scheduling logic: it feeds messages to ``receive``, asks ``launch`` whether to step, turns a
launched batch into one engine step, and hands the result to ``complete``. Hand-offs leave through the
mailbox without waiting for the peer, so this model goes straight on with its other requests.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from trcore import CLIENT, Batch, PeerReq, Request, StepResult, Subserver
from trcore.replicas import ReplicaTable
from trserve.engine.types import Engine, EngineStepError, StepItem, TokenOut
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
    StepReport,
    incarnation_of,
)
from trserve.runtime.reports import (
    LoopStats,
    committed_tokens,
    emulated_fields,
    finished_message,
    python_objects,
    resume_points,
    rss_bytes,
)
from trserve.runtime.transport import FRONTEND

log = logging.getLogger(__name__)

#: How long an idle loop sleeps between checks that its parent is alive.
IDLE_POLL_S = 1.0
#: How long a request id stays remembered after an abort, so late hand-offs for it are dropped.
TOMBSTONE_S = 600.0


class Outbox(Protocol):
    def send(self, dest: int, message: Any) -> None: ...
    def receive_all(self, timeout_s: float | None) -> list[Any]: ...
    def rewire(self, dest: int, address: str) -> None: ...


class SubserverLoop:
    """Runs one model: ``run()`` returns after a :class:`Shutdown` message or when the parent process dies.

    The count its threshold table keys on arrives in :class:`Active` messages (0 until the first). A step that raises
    :class:`~trserve.engine.types.EngineStepError` fails the requests the engine names as its culprits (the
    others are stepped again without them), or the whole batch when it names none; any other exception ends
    the process.

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

    @property
    def model(self) -> int:
        return self.sub.model

    def run(self) -> None:
        while not self.is_stopping:
            self.run_once()

    def run_once(self) -> None:
        """Handle what arrived, then launch a step if the policy allows, else wait for a message or deadline."""
        self._handle_all(self.mailbox.receive_all(0))
        batch = self.sub.launch(self.clock())
        if batch is not None:
            self.stats.launched()
            self._step(batch)
            self.stats.stepped()
            return
        self._handle_all(self.mailbox.receive_all(self._wait_timeout()))
        if self.sub.num_ready == 0 and os.getppid() != self._parent:
            log.warning("model %d: parent process exited; stopping", self.model)
            self.is_stopping = True

    def _wait_timeout(self) -> float:
        """Until the queue's max-wait deadline, if any: anything else that can launch it (a request, a change of the
        active count, a new policy) arrives as a message and ends the wait."""
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
        if msg.spec is None and rid not in self.sub.requests:
            # Addressed to a previous incarnation of this model (it restarted); the front end resumes the request.
            log.warning("model %d: dropping hand-off for unknown request %s", self.model, rid)
            return
        self.sub.receive(msg, self.clock())

    def _forget(self, request_id: str, incarnation: int | None = None) -> None:
        """Release a request here (finished elsewhere or aborted) and free its KV in the engine; later hand-offs of
        ``incarnation`` (at least the one held here) or earlier are dropped."""
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
        items = [StepItem(r.request_id, unseen_tokens(r, self.model), r.spec.sampling) for r in batch.requests]
        outputs_before = [r.num_output_tokens for r in batch.requests]
        started = time.perf_counter()
        outs, failed = self._step_isolated(items)
        if not outs:  # nothing of the batch could run; keep serving the rest
            self._fail_batch(batch, failed)
            return
        step_s = time.perf_counter() - started
        # The culprits' outputs are fillers: their tokens and routes are dropped right after ``complete``.
        filler = TokenOut(0, {}, None if any(o.entropy is None for o in outs.values()) else 0.0)
        step = [outs.get(rid, filler) for rid in batch.request_ids]
        result = StepResult(
            token_ids=[o.token_id for o in step],
            top_logprobs=[o.top_logprobs for o in step],
            entropy=[o.entropy for o in step],
            request_ids=batch.request_ids,
        )
        handoffs = self.sub.complete(batch, result, self.clock())
        if failed:
            handoffs = [(dest, msg) for dest, msg in handoffs if msg.request_id not in failed]
            for rid in failed:
                self._forget(rid)
        self.stats.num_steps += 1
        report = self._report(batch, outputs_before, step_s, handoffs, failed)
        self.mailbox.send(FRONTEND, report)

    def _step_isolated(self, items: list[StepItem]) -> tuple[dict[str, TokenOut], dict[str, str]]:
        """Step ``items``; when the engine names the requests that broke the step, drop them and step the others
        again. Returns outputs and failure messages by request id (all fail when the engine cannot tell)."""
        failed: dict[str, str] = {}
        while items:
            try:
                outs = self.engine.step(items)
            except EngineStepError as exc:
                ids = {item.request_id for item in items}
                culprits = {r: why for r, why in exc.culprits.items() if r in ids} or dict.fromkeys(ids, str(exc))
                prefix = f"model {self.model} could not step the request"
                failed.update({r: f"{prefix}: {why}" for r, why in culprits.items()})
                items = [item for item in items if item.request_id not in culprits]
                continue
            return {item.request_id: out for item, out in zip(items, outs, strict=True)}, failed
        return {}, failed

    def _report(
        self,
        batch: Batch,
        before: list[int],
        step_s: float,
        handoffs: list[tuple[int, PeerReq]],
        failed: dict[str, str],
    ) -> Any:
        finished: list[Finished] = []
        num_handoffs = 0
        outgoing: dict[int, list[PeerReq]] = {}  # one message per destination process
        for dest, msg in handoffs:
            if dest == CLIENT:
                finished.append(finished_message(msg, batch))
                self.engine.release(msg.request_id)
            else:
                num_handoffs += 0 if msg.is_finished else 1
                proc = dest if self.table is None else self._process_of(dest, msg, batch)
                outgoing.setdefault(proc, []).append(msg)
        for proc, msgs in outgoing.items():
            self.mailbox.send(proc, Handoffs(tuple(msgs), sent_at=time.time()))
        self.stats.num_handoffs += num_handoffs
        done = {f.request_id for f in finished} | set(failed)
        tokens = committed_tokens(batch, before, done)
        return StepReport(
            model=self.model,
            batch_size=batch.size,
            num_new_tokens=sum(batch.num_new_tokens),
            step_s=step_s,
            num_ready=self.sub.num_ready,
            num_resident=len(self.sub.requests),
            num_handoffs=num_handoffs,
            kv_usage=self.engine.kv_usage(),
            tokens=tokens,
            finished=finished,
            failed=[Failed(rid, message) for rid, message in failed.items()],
            routes=resume_points(batch, handoffs, done),
            **emulated_fields(self.engine),
            replica=self.replica,
            **self.stats.take_transit(),
        )

    def _process_of(self, model: int, msg: PeerReq, batch: Batch) -> int:
        """The process of the request's pinned replica of ``model`` (a release carries no routing extra: the
        request's own record in ``batch`` has its pins)."""
        assert self.table is not None
        extra = msg.extra or next(r.extra for r in batch.requests if r.request_id == msg.request_id)
        return self.table.proc_of_request(model, extra)

    def _fail_batch(self, batch: Batch, messages: dict[str, str]) -> None:
        failed = []
        for req in batch.requests:
            self._forget(req.request_id)
            failed.append(Failed(req.request_id, messages.get(req.request_id, f"model {self.model} failed")))
        self.sub.fail(batch)  # the batch will never complete; its requests are gone
        report = StepReport(self.model, batch.size, 0, 0.0, self.sub.num_ready, len(self.sub.requests), 0,
                            self.engine.kv_usage(), failed=failed, replica=self.replica)  # fmt: skip
        self.mailbox.send(FRONTEND, report)

    def state(self, token: int, detail: bool = False) -> State:
        """This model's resident requests, KV usage and resident memory (``detail``: live Python objects too)."""
        return State(
            model=self.model,
            token=token,
            pid=os.getpid(),
            num_resident=len(self.sub.requests),
            num_ready=self.sub.num_ready,
            kv_usage=self.engine.kv_usage(),
            rss_bytes=rss_bytes(),
            num_steps=self.stats.num_steps,
            engine={"python_objects": python_objects()} if detail else {},
            received=dict(getattr(self.mailbox, "counts", {})),
            replica=self.replica,
        )


def unseen_tokens(req: Request, model: int) -> list[int]:
    return req.token_ids[req.anchors[model] :]
