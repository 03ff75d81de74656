"""The ``lockstep`` baseline: one process drives every model's engine, one model at a time.

``python -m trserve.baselines.lockstep RUN_JSON 0``. R2R's original loop: the entry (small) model steps the whole
batch; the requests it routes away are stepped on their model while the rest of the batch waits, for as many
steps as their visit lasts, and the entry model steps again only when every request is back. The same semantics
as the simulator's ``lockstep`` baseline (the entry model waits for all active requests) and the throughput
model's B = (N, 1). The driver holds one ``trcore.Subserver`` per model (threshold 1) and never runs two models
at once. Engines live in engine-only workers (one vLLM engine per process); since they never run at the same
time, each may use all of the machine's cores.

Memory is the core's, as in the routed mode: when the first request arrives the driver asks each engine worker
for its KV budget (a call with no items) and gives that model's subserver the config's ``memory.policy``; a step
then frees what the core spilled or preempted before it runs, and a request too large for a whole cache fails.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trcore import CLIENT, Batch, BatchingPolicy, KVMemory, PeerReq, ProgramError, StepResult, Subserver
from trcore.memory import KVBudget
from trserve.runtime.memory_setup import memory_for
from trserve.runtime.messages import (
    Abort,
    Failed,
    Probe,
    Ready,
    Release,
    Rewire,
    Shutdown,
    State,
    StepCall,
    StepReply,
    StepReport,
    resume_model,
)  # fmt: skip
from trserve.runtime.reports import (
    committed_tokens,
    failure_report,
    finished_message,
    memory_fields,
    queued_ids,
    resume_points,
    rss_bytes,
    unservable_failures,
)
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND
from trserve.runtime.worker import build_program, worker_main

log = logging.getLogger(__name__)


def engine_proc(model: int) -> int:
    """Worker index of model ``model``'s engine (the driver is worker 0)."""
    return model + 1


class LockstepDriver:
    """Rounds over the models; every step is a blocking call to that model's engine worker."""

    def __init__(
        self,
        subs: list[Subserver],
        mailbox: Any,
        entry: int = 0,
        clock: Any = time.monotonic,
        memory: Callable[[int, KVBudget | None], KVMemory | None] | None = None,
    ) -> None:
        """``memory(model, budget)``: the KV accounting for a model whose engine reported ``budget`` (None: the
        driver keeps none)."""
        self.subs = subs
        self._memory_for = memory
        self.entry = entry
        self.mailbox = mailbox
        self.clock = clock
        self.is_stopping = False
        self.num_steps = 0
        self._backlog: deque[Any] = deque()
        self._calls = itertools.count()

    def run(self) -> None:
        parent = os.getppid()
        while not self.is_stopping and os.getppid() == parent:
            self.run_round()

    def run_round(self) -> None:
        busy = any(sub.num_ready for sub in self.subs)
        self._handle_all([*self._drain_backlog(), *self.mailbox.receive_all(0 if busy else 1.0)])
        if self._memory_for is not None and any(sub.num_ready for sub in self.subs):  # before the first launch
            self._attach_memory(self._memory_for)
        for sub in self.subs:
            if sub.model == self.entry and self._anyone_away():
                continue  # the batch waits until every routed request is back
            batch = sub.launch(self.clock())
            self._fail_unservable(sub)
            if batch is not None:
                self._step(sub, batch)

    def _attach_memory(self, memory_for: Callable[[int, KVBudget | None], KVMemory | None]) -> None:
        """Ask every engine worker for its KV budget (once, before the first step) and account for it."""
        self._memory_for = None
        for sub in self.subs:
            reply = self._request(sub.model, StepCall(next(self._calls), []))
            blocks, block_size, max_seqs = reply.kv_budget or (0, 0, 0)
            budget = KVBudget(blocks, block_size, max_seqs or None) if blocks else None
            sub.memory = memory_for(sub.model, budget)
            log.info("lockstep: model %d KV %s", sub.model, budget)

    def _fail_unservable(self, sub: Subserver) -> None:
        """Fail the requests the core found too large for this model's whole KV cache."""
        if unservable := sub.take_unservable():
            failed = unservable_failures(sub, unservable)
            for req in unservable:
                self._forget(req.request_id)
            self.mailbox.send(FRONTEND, failure_report(sub, failed))

    def _anyone_away(self) -> bool:
        """Whether a model other than the entry model holds a request ready to step."""
        return any(sub.num_ready for sub in self.subs if sub.model != self.entry)

    def _drain_backlog(self) -> list[Any]:
        out = list(self._backlog)
        self._backlog.clear()
        return out

    def _handle_all(self, messages: list[Any]) -> None:
        for msg in messages:
            if isinstance(msg, PeerReq):
                if not msg.is_finished and msg.spec is not None:
                    self._admit(msg)
            elif isinstance(msg, Abort):
                self._forget(msg.request_id)
            elif isinstance(msg, Probe):
                self.mailbox.send(FRONTEND, self._state(msg.token))
            elif isinstance(msg, Rewire):
                self.mailbox.rewire(msg.model, msg.address)
            elif isinstance(msg, Shutdown):
                self.is_stopping = True

    def _admit(self, msg: PeerReq) -> None:
        """A request from the front end: a new one starts on the entry model; one resumed after a crash on the model
        its last step's route named (``RESUME_MODEL``), with that step's routing state, as in the routed mode."""
        model, msg = resume_model(msg, self.entry)
        self.subs[model].receive(msg, self.clock())

    def _state(self, token: int) -> State:
        """The answer to a probe: the requests held, those ready, and each model's KV accounting."""
        subs = self.subs
        resident = len({rid for sub in subs for rid in sub.requests})
        queued = tuple(rid for sub in subs for rid in queued_ids(sub))
        memory = {sub.model: memory_fields(sub.memory) for sub in subs if sub.memory is not None}
        ready = sum(sub.num_ready for sub in subs)
        return State(-1, token, os.getpid(), resident, ready, 0.0, rss_bytes(), self.num_steps, queued=queued,
                     memory_by_model=memory)  # fmt: skip

    def _forget(self, request_id: str) -> None:
        for m, sub in enumerate(self.subs):
            if sub.abort(request_id):
                self.mailbox.send(engine_proc(m), Release([request_id]))

    def _call(self, model: int, batch: Batch) -> StepReply:
        if batch.evicted:  # spilled or preempted by the core: their blocks go before the step takes them
            self.mailbox.send(engine_proc(model), Release(list(batch.evicted)))
        items = [
            (r.request_id, r.token_ids[len(r.token_ids) - n :], dict(r.spec.sampling))
            for r, n in zip(batch.requests, batch.num_new_tokens, strict=True)
        ]
        return self._request(model, StepCall(next(self._calls), items))

    def _request(self, model: int, call: StepCall) -> StepReply:
        """Send ``call`` to ``model``'s engine worker and wait for its reply (the whole system waits)."""
        self.mailbox.send(engine_proc(model), call)
        reply: StepReply | None = None
        while reply is None:  # the whole system waits for this one step
            # Every message of a batch is kept: what arrives with the reply (new requests, aborts) is handled next.
            for msg in self.mailbox.receive_all(1.0):
                if reply is None and isinstance(msg, StepReply) and msg.call_id == call.call_id:
                    reply = msg
                elif isinstance(msg, Rewire):  # an engine restarted; if it is this one, the call is lost
                    self.mailbox.rewire(msg.model, msg.address)
                    if reply is None and msg.model == engine_proc(model):
                        reply = StepReply(call.call_id, [], 0.0, 0.0, error="its engine worker restarted")
                else:
                    self._backlog.append(msg)
        return reply

    def _step(self, sub: Subserver, batch: Batch) -> None:
        model = sub.model
        before = [r.num_output_tokens for r in batch.requests]
        reply = self._call(model, batch)
        if reply.error is not None:
            return self._fail(sub, batch, f"model {model} could not step: {reply.error}", reply.kv_usage)
        result = StepResult(
            token_ids=[o[0] for o in reply.outputs],
            top_logprobs=[o[1] for o in reply.outputs],
            entropy=[o[2] for o in reply.outputs] if all(o[2] is not None for o in reply.outputs) else None,
            request_ids=batch.request_ids,
        )
        now = self.clock()
        try:
            handoffs = sub.complete(batch, result, now)
        except ProgramError as exc:  # a bug of the routing program: its step's requests fail, the others go on
            return self._fail(sub, batch, str(exc), reply.kv_usage)
        self.num_steps += 1
        finished, num_handoffs = [], 0
        for dest, msg in handoffs:
            if dest == CLIENT:
                finished.append(finished_message(msg, batch))
                self.mailbox.send(engine_proc(model), Release([msg.request_id]))
            elif msg.is_finished:
                self.subs[dest].receive(msg, now)
                self.mailbox.send(engine_proc(dest), Release([msg.request_id]))
            else:
                num_handoffs += 1
                self.subs[dest].receive(msg, now)
        done = {f.request_id for f in finished}
        tokens = committed_tokens(batch, before, done)
        routes = resume_points(batch, handoffs, done, sub.program.moving_extra)  # where to resume after a crash
        report = StepReport(
            model, batch.size, sum(batch.num_new_tokens), reply.step_s, sub.num_ready, len(sub.requests),
            num_handoffs, reply.kv_usage, tokens=tokens, finished=finished, routes=routes,
            emulated_s=reply.emulated_s, wait_cpu_s=reply.wait_cpu_s, memory=memory_fields(sub.memory),
        )  # fmt: skip
        self.mailbox.send(FRONTEND, report)

    def _fail(self, sub: Subserver, batch: Batch, why: str, kv_usage: float) -> None:
        """Every request of ``batch`` fails with ``why``: forgotten on every model, reported to the front end."""
        for r in batch.requests:
            self._forget(r.request_id)
        sub.fail(batch)
        failed = [Failed(r.request_id, why) for r in batch.requests]
        self.mailbox.send(FRONTEND, failure_report(sub, failed, batch.size, kv_usage))


def run(spec: RunSpec, index: int) -> None:
    n = spec.config.num_models
    max_batch = [spec.policy(m).max_batch for m in range(n)]
    subs = [Subserver(build_program(spec, m), BatchingPolicy(threshold=1, max_batch=max_batch[m])) for m in range(n)]
    mailbox = spec.endpoints.mailbox(index)
    mailbox.send(FRONTEND, Ready(index, os.getpid(), 0.0, address=mailbox.address))
    driver = LockstepDriver(subs, mailbox, entry=spec.config.entry_model, memory=lambda m, b: memory_for(spec, m, b))
    driver.run()
    mailbox.close()


if __name__ == "__main__":
    sys.exit(worker_main(run))
