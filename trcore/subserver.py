"""The subserver core: one model's scheduler as a clock-free state machine (receive / launch / complete)."""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from trcore.kvplan import KVMemory
from trcore.policy import BatchingPolicy
from trcore.program import RoutingProgram, checked_routing
from trcore.request import CLIENT, PeerReq, Request, RequestSpec, RequestStatus
from trcore.step import Batch, StepResult

HandOff = tuple[int, PeerReq]
# Plain module constants: cheaper to read than enum class attributes in the per-request loops.
_WAITING, _RUNNING, _PENDING, _FINISHED = (
    RequestStatus.WAITING,
    RequestStatus.RUNNING,
    RequestStatus.PENDING,
    RequestStatus.FINISHED,
)


def _has_reached_stop(spec: RequestSpec, token_ids: list[int]) -> bool:
    """``Request.has_reached_stop`` without the property calls (hot path)."""
    num_output = len(token_ids) - spec.num_prompt_tokens
    return num_output >= spec.max_tokens or (num_output > spec.min_tokens and token_ids[-1] in spec.stop_token_ids)


class RouteEvent(NamedTuple):
    """One routing decision, as recorded for traces: request, model that stepped, where it went next,
    whether the sampled token was committed, when (the step's end) and when that step was launched (None in traces
    recorded before launch times were)."""

    request_id: str
    model: int
    destination: int
    kept: bool
    time: float
    launched: float | None = None


class ProtocolError(RuntimeError):
    """A driver broke the receive / launch / complete contract (a bug, not bad user input)."""


class Subserver:
    """One model's scheduler. Drivers call :meth:`receive`, :meth:`launch` and :meth:`complete` and pass
    the time in; the core never reads a clock, sleeps or does I/O.

    ``num_active`` (the number of active requests system-wide, kept by the driver) feeds threshold tables.

    With ``memory`` (a :class:`~trcore.kvplan.KVMemory`), launch also decides KV: a step takes only requests whose
    blocks fit, after spilling parked sessions or preempting waiting ones; the batch names what the driver must
    free first (``Batch.evicted``) and :meth:`take_unservable` the requests that can never fit.
    """

    def __init__(
        self,
        program: RoutingProgram,
        policy: BatchingPolicy,
        *,
        record_trace: bool = False,
        memory: KVMemory | None = None,
    ) -> None:
        self.program = program
        self.model = program.model
        self.policy = policy
        self.requests: dict[str, Request] = {}
        self.running: Batch | None = None
        self.num_active: int | None = None
        self.trace: list[RouteEvent] | None = [] if record_trace else None
        self._ready: deque[Request] = deque()
        self.memory = memory
        self._unservable: list[Request] = []
        self._is_memory_bound = False  # the last launch found ready requests but no memory for any of them

    @property
    def num_ready(self) -> int:
        return len(self._ready)

    @property
    def num_pending(self) -> int:
        return sum(1 for r in self.requests.values() if r.status == RequestStatus.PENDING)

    def receive(self, peer_req: PeerReq, now: float) -> None:
        """A request arrives from the client or a peer; a finished one is released."""
        self._is_memory_bound = False
        if peer_req.is_finished:
            self.abort(peer_req.request_id, num_tokens=max(peer_req.anchors, default=0))
            return
        req = self.requests.get(peer_req.request_id)
        if req is None:
            if peer_req.spec is None:
                raise ProtocolError(f"model {self.model}: unknown request {peer_req.request_id} without spec")
            req = Request(spec=peer_req.spec, token_ids=[], anchors=list(peer_req.anchors))
            self.requests[peer_req.request_id] = req
        elif req.status is not _PENDING:
            raise ProtocolError(f"model {self.model}: request {req.request_id} received while {req.status.name}")
        self.program.receive(req, peer_req)
        if self.memory is not None:
            self.memory.unpark(peer_req.request_id, len(req.token_ids))
        req.status = _WAITING
        req.ready_since = now
        self._ready.append(req)

    def launch(self, now: float) -> Batch | None:
        """The delayed-batching decision: a batch to step now, or None."""
        ready = self._ready
        if self.running is not None or not ready:
            return None
        if not self.policy.should_launch(len(ready), ready[0].ready_since, now, self.num_active):
            return None
        size = min(len(ready), self.policy.max_batch)
        if self.memory is not None:
            return self._launch_with_memory(size, now)
        model = self.model
        reqs, new_tokens, context = [], [], []
        for _ in range(size):  # one pass: this runs once per request-step, the simulator's hot path
            r = ready.popleft()
            r.status = _RUNNING
            n = len(r.token_ids)
            reqs.append(r)
            new_tokens.append(n - r.anchors[model])
            context.append(n)
        self.running = Batch(model, tuple(reqs), tuple(new_tokens), tuple(context), now)
        return self.running

    def _launch_with_memory(self, size: int, now: float) -> Batch | None:
        memory, model = self.memory, self.model
        assert memory is not None
        chosen, evicted, unservable = memory.plan(list(self._ready), self.requests, model, size, now)
        for req in unservable:
            self.abort(req.spec.request_id)
            self._unservable.append(req)
        if not chosen:
            if evicted:
                raise ProtocolError(f"model {model}: memory freed {evicted} but launched nothing")
            self._is_memory_bound = bool(self._ready)  # only a message (a release, a return) can change that
            return None
        picked = {id(r) for r in chosen}
        self._ready = deque(r for r in self._ready if id(r) not in picked)
        new_tokens = tuple(memory.num_new_tokens(r, model) for r in chosen)
        for req in chosen:
            req.status = _RUNNING
            memory.spilled.discard(req.spec.request_id)
        context = tuple(len(r.token_ids) for r in chosen)
        self.running = Batch(model, tuple(chosen), new_tokens, context, now, tuple(evicted))
        return self.running

    def take_unservable(self) -> list[Request]:
        """Requests dropped because they cannot fit in this model's whole KV cache (the driver fails them)."""
        taken, self._unservable = self._unservable, []
        return taken

    def complete(self, batch: Batch, step: StepResult, now: float) -> list[HandOff]:
        """Commit a finished step's tokens, route every request, and return the hand-offs to deliver."""
        if batch is not self.running:
            raise ProtocolError(f"model {self.model}: completing a batch that is not running")
        if len(step) != batch.size:
            raise ProtocolError(f"model {self.model}: {len(step)} outputs for a batch of {batch.size}")
        dests, keep = checked_routing(self.program, step, batch)  # a ProgramError leaves the batch running
        self.running = None
        if self.memory is not None:
            self.memory.after_step(r.spec.request_id for r in batch.requests)
        tokens = step.token_ids
        model, trace, ready = self.model, self.trace, self._ready
        launched = batch.launch_time
        handoffs: list[HandOff] = []
        # One pass per request, everything inlined: this loop is the simulator's hot path.
        for k, req in enumerate(batch.requests):
            if req.status is _FINISHED:  # aborted while its step ran
                continue
            dest = dests[k]
            ids = req.token_ids
            req.anchors[model] = len(ids)
            kept = True if keep is None else bool(keep[k])
            if kept:
                ids.append(tokens[k])
                if req.first_token_time is None:
                    req.first_token_time = now
            req.steps_without_token = 0 if len(ids) > req.num_tokens_seen else req.steps_without_token + 1
            req.num_tokens_seen = len(ids)
            if trace is not None:
                trace.append(RouteEvent(req.spec.request_id, model, dest, kept, now, launched))
            if kept and _has_reached_stop(req.spec, ids):
                handoffs.extend(self._finish(req, now))
            elif dest == model:
                req.status = _WAITING
                req.ready_since = now
                ready.append(req)
            else:
                req.status = _PENDING
                if self.memory is not None:
                    self.memory.park(req.spec.request_id, dest, now, len(ids))
                handoffs.append((dest, self.program.send(req, dest)))
        return handoffs

    def fail(self, batch: Batch) -> list[Request]:
        """The running ``batch`` will never complete (its step failed): forget it and every request in it that
        is still resident here. Returns those requests; the driver reports them and frees what its engine holds
        (peers that hold one of them are told by the driver too)."""
        if batch is not self.running:
            raise ProtocolError(f"model {self.model}: failing a batch that is not running")
        self.running = None
        failed = [req for req in batch.requests if self.requests.get(req.spec.request_id) is req]
        for req in failed:
            self.abort(req.spec.request_id)
        return failed

    def _finish(self, req: Request, now: float) -> list[HandOff]:
        req.status = RequestStatus.FINISHED
        req.finish_time = now
        del self.requests[req.spec.request_id]
        self.program.release(req.spec.request_id)
        if self.memory is not None:
            self.memory.release(req.spec.request_id)
        n_prompt = req.spec.num_prompt_tokens
        done = PeerReq(
            request_id=req.spec.request_id,
            start=n_prompt,
            token_ids=tuple(req.token_ids[n_prompt:]),
            anchors=tuple(req.anchors),
            origin=self.model,
            is_finished=True,
        )
        releases = [
            (m, PeerReq(req.spec.request_id, 0, (), done.anchors, self.model, is_finished=True))
            for m, anchor in enumerate(req.anchors)
            if m != self.model and anchor > 0
        ]
        return [(CLIENT, done), *releases]

    def abort(self, request_id: str, num_tokens: int | None = None) -> bool:
        """Forget a request (client gone, or finished elsewhere at ``num_tokens``); True if it was resident here."""
        self._is_memory_bound = False
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        if req.status == RequestStatus.WAITING:
            self._ready.remove(req)
        req.status = RequestStatus.FINISHED
        self.program.release(request_id)
        if self.memory is not None:
            self.memory.release(request_id, num_tokens)
        return True

    def next_deadline(self) -> float | None:
        """When the waiting queue will launch by max wait (drivers wake up then), or None (also while it waits for
        memory: only a message can free some)."""
        if self.running is not None or not self._ready or self._is_memory_bound:
            return None
        return self.policy.deadline(self._ready[0].ready_since)
