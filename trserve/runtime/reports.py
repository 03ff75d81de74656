"""What a subserver tells the front end: per step, the tokens it committed, the requests it finished and where each
live request goes on (the front end's resume points after a crash); per probe, its memory."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trcore import CLIENT, Batch, KVMemory, PeerReq, Request, StepResult, Subserver
from trcore.request import RequestStatus
from trserve.engine.types import Engine, TokenOut
from trserve.runtime.messages import Failed, Finished, Handoffs, Route, State, StepReport


def resume_points(
    batch: Batch, handoffs: list[tuple[int, PeerReq]], done: set[str], state: Callable[[Request], dict[str, Any]]
) -> list[Route]:
    """Where each live request of ``batch`` goes on after this step: ``(request_id, model, num_output, extra)``,
    ``extra`` being its routing state as ``state`` gives it (the program's
    :meth:`~trcore.RoutingProgram.moving_extra`, which leaves out what the request brought and no model changes:
    the front end keeps its own copy of that). The front end keeps the latest, to resume the request on that model
    if a process dies."""
    moved = {msg.request_id: dest for dest, msg in handoffs if dest != CLIENT and not msg.is_finished}
    return [
        (r.request_id, moved.get(r.request_id, batch.model), r.num_output_tokens, state(r) or None)
        for r in batch.requests
        if r.request_id not in done and not r.is_finished
    ]


def committed_tokens(batch: Batch, before: list[int], done: set[str]) -> list[tuple[str, int, tuple[int, ...]]]:
    """``(request_id, offset, tokens)`` for each request of ``batch`` whose output grew past ``before`` (its
    output length at launch); finished requests (``done``) report their whole output separately."""
    return [
        (r.request_id, n, tuple(r.output_token_ids[n:]))
        for r, n in zip(batch.requests, before, strict=True)
        if r.num_output_tokens > n and r.request_id not in done
    ]


def step_result(batch: Batch, outs: dict[str, TokenOut]) -> StepResult:
    """The core's view of a step's outputs (by request id). A request missing from ``outs`` (its step failed) gets
    a filler output: its token and route are dropped right after ``complete``."""
    filler = TokenOut(0, {}, None if any(o.entropy is None for o in outs.values()) else 0.0)
    step = [outs.get(rid, filler) for rid in batch.request_ids]
    return StepResult(
        token_ids=[o.token_id for o in step],
        top_logprobs=[o.top_logprobs for o in step],
        entropy=[o.entropy for o in step],
        request_ids=batch.request_ids,
    )


def step_outcome(
    batch: Batch, before: list[int], handoffs: list[tuple[int, PeerReq]], finished: list[Finished],
    failed: dict[str, str], state: Callable[[Request], dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """What a completed step of ``batch`` produced, as :class:`StepReport` fields, copied when it completes: the
    tokens it committed past ``before`` (each request's output length at launch), the requests it finished or
    failed, and where the others go on (with the routing state ``state`` gives, :func:`resume_points`). A report
    sent later, while the next step runs, must not see what changed the requests meanwhile (a peer handing one
    back, the next step's routing decisions)."""
    done = {f.request_id for f in finished} | set(failed)
    return {
        "model": batch.model,
        "batch_size": batch.size,
        "num_new_tokens": sum(batch.num_new_tokens),
        "tokens": committed_tokens(batch, before, done),
        "finished": finished,
        "failed": [Failed(rid, message) for rid, message in failed.items()],
        "routes": resume_points(batch, handoffs, done, state),
    }


#: The core's cumulative memory counters in a report's ``memory`` field (:func:`memory_fields`).
MEMORY_EVENTS = ("spilled", "preempted", "recomputed_tokens", "admission_waits")


def memory_fields(memory: KVMemory | None) -> dict[str, int]:
    """The core's KV accounting as a report's ``memory`` field (empty without accounting)."""
    if memory is None:
        return {}
    ledger, stats = memory.ledger, memory.stats
    return {
        "blocks_total": ledger.budget.num_blocks,
        "block_size": ledger.budget.block_size,
        "blocks_used": ledger.num_used,
        "blocks_parked": memory.num_parked_blocks(),
        "spilled": stats.num_spilled,
        "preempted": stats.num_preempted,
        "recomputed_tokens": stats.num_recomputed_tokens,
        "admission_waits": stats.num_admission_waits,
        "waiting_admission": len(stats.waiting_now),
        "pid": os.getpid(),  # whose counters these are: a restarted worker's begin again at 0
    }


def failure_report(
    sub: Subserver, failed: list[Failed], batch_size: int = 0, kv_usage: float = 0.0, replica: int = 0
) -> StepReport:
    """The report of requests that failed without a step (a failed batch of ``batch_size``, or unservable ones);
    ``kv_usage``: the engine's cache use, where there is an engine to ask."""
    return StepReport(sub.model, batch_size, 0, 0.0, sub.num_ready, len(sub.requests), 0, kv_usage, failed=failed,
                      replica=replica, memory=memory_fields(sub.memory))  # fmt: skip


def unservable_failures(sub: Subserver, requests: list[Request]) -> list[Failed]:
    """The front end's messages for requests too large for ``sub``'s whole KV cache."""
    capacity = sub.memory.ledger.budget.capacity_tokens if sub.memory is not None else 0
    why = "model {}: {} tokens cannot fit its KV cache of {} tokens"
    return [Failed(r.request_id, why.format(sub.model, r.num_tokens, capacity)) for r in requests]


def loop_state(
    sub: Subserver, engine: Engine, num_steps: int, received: dict[str, int], replica: int, token: int, detail: bool
) -> State:
    """A subserver loop's answer to a probe (``detail``: live Python objects too)."""
    return State(
        model=sub.model,
        token=token,
        pid=os.getpid(),
        num_resident=len(sub.requests),
        num_ready=sub.num_ready,
        kv_usage=engine.kv_usage(),
        rss_bytes=rss_bytes(),
        num_steps=num_steps,
        engine={"python_objects": python_objects()} if detail else {},
        received=received,
        replica=replica,
        memory=memory_fields(sub.memory),
        threshold=sub.policy.threshold,
        queued=queued_ids(sub),
    )


def queued_ids(sub: Subserver) -> tuple[str, ...]:
    """The requests ``sub`` holds that are not parked while another model continues them."""
    return tuple(rid for rid, req in sub.requests.items() if req.status is not RequestStatus.PENDING)


def step_report(outcome: dict[str, Any], counts: dict[str, Any], stats: LoopStats) -> StepReport:
    """The report of a completed step: its ``outcome`` (:func:`step_outcome`), the loop's ``counts`` and
    measurements as they were when the step completed, and the hand-offs ``stats`` received since the last report."""
    return StepReport(**outcome, **counts, **stats.take_transit())


def split_handoffs(
    batch: Batch, handoffs: list[tuple[int, PeerReq]], process_of: Callable[[int, PeerReq, Batch], int]
) -> tuple[list[Finished], dict[int, list[PeerReq]], int]:
    """A step's hand-offs split three ways: the front end's messages for the requests that finished, the others by
    destination process (``process_of(model, msg, batch)``), and how many of those moved a live request."""
    finished: list[Finished] = []
    outgoing: dict[int, list[PeerReq]] = {}
    num_moved = 0
    for dest, msg in handoffs:
        if dest == CLIENT:
            finished.append(finished_message(msg, batch))
        else:
            num_moved += 0 if msg.is_finished else 1
            outgoing.setdefault(process_of(dest, msg, batch), []).append(msg)
    return finished, outgoing, num_moved


def finished_message(msg: PeerReq, batch: Batch) -> Finished:
    """The front end's message for a request that finished in ``batch`` (``msg`` is the core's CLIENT hand-off)."""
    req = next(r for r in batch.requests if r.request_id == msg.request_id)
    last = req.token_ids[-1] if req.num_output_tokens else None
    reason = "stop" if last is not None and last in req.spec.stop_token_ids else "length"
    return Finished(msg.request_id, tuple(msg.token_ids), reason)


def python_objects() -> int:
    """Live objects the garbage collector tracks, after a collection (a leak of Python objects shows here)."""
    import gc

    gc.collect()
    return len(gc.get_objects())


def rss_bytes() -> int:
    """Resident memory of this process and its children (an engine core may run in a child)."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return int(total)


def touched_requests(msg: Any) -> list[str]:
    """The request ids a subserver message is about (a report's tokens, routes, finishes and failures)."""
    if not isinstance(msg, StepReport):
        return []
    ids = [t[0] for t in msg.tokens] + [r[0] for r in msg.routes]
    ids += [f.request_id for f in msg.finished] + [f.request_id for f in msg.failed]
    return list(dict.fromkeys(ids))


@dataclass
class LoopStats:
    """A subserver loop's counters: steps, hand-offs sent, and the hand-off messages received since its last
    report, with what they cost beyond the simulator's idealization (``time.time()``, comparable across processes;
    across nodes it includes the clocks' offset):

    * ``handoff_transit_s``: summed time from a message's sending, or from the end of the step the receiver was
      in when it was sent, until the receiver's loop took it (the transit plus the loop's own turnaround; in the
      simulator a hand-off joins the queue the instant its step ends);
    * ``handoffs_late``: messages that missed a launch: the receiver launched a step after the message was sent
      and before it took it (in the simulator that step would have carried the request)."""

    num_steps: int = 0
    num_handoffs: int = 0
    handoffs_received: int = 0
    handoff_transit_s: float = 0.0
    handoffs_late: int = 0
    last_launch_at: float = 0.0
    free_since: float = 0.0

    def launched(self) -> None:
        self.last_launch_at = time.time()

    def stepped(self) -> None:
        self.free_since = time.time()

    def received(self, msg: Handoffs) -> None:
        if not msg.sent_at:
            return
        now = time.time()
        self.handoffs_received += 1
        self.handoff_transit_s += max(0.0, now - max(msg.sent_at, self.free_since))
        self.handoffs_late += self.last_launch_at > msg.sent_at

    def take_transit(self) -> dict[str, Any]:
        """The received hand-offs' fields of a step report, counted from zero again."""
        taken = {"handoffs_received": self.handoffs_received, "handoff_transit_s": self.handoff_transit_s,
                 "handoffs_late": self.handoffs_late}  # fmt: skip
        self.handoffs_received, self.handoff_transit_s, self.handoffs_late = 0, 0.0, 0
        return taken


def emulated_fields(engine: Engine) -> dict[str, Any]:
    """An emulated engine's step latency and wait CPU for the step report (nothing for other engines)."""
    emulated = getattr(engine, "last_emulated_s", None)
    if emulated is None:
        return {}
    cpu = getattr(engine, "last_wait_cpu_s", 0.0)
    return {"emulated_s": emulated, "wait_cpu_s": cpu}
