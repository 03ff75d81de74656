"""What keeps a model's death or a lost message from costing requests: suspend and resume around a restart,
and the stall watchdog.

While a dead model restarts, every dispatched request is aborted on every live model (its committed output stays
with the front end) and new requests wait. Once every model is up again, each request resumes as a fresh
incarnation under the same id: prompt plus committed output as its prompt, the budget reduced by it, on the model
and with the routing state its last step reported (:class:`trserve.frontend.generation.Generation.resume`). With
greedy decoding the continuation is the one an uninterrupted run writes; the client sees a pause, no token twice
and none missing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from trserve.frontend.book import FrontEnd
from trserve.frontend.generation import Failure, Generation
from trserve.frontend.metrics import Metrics
from trserve.runtime.messages import RESUME_MODEL, Abort

log = logging.getLogger(__name__)


class Recovery:
    """Model deaths, restarts and stalls for one front end (driven by the launcher, which sees the processes).

    ``stall_timeout_s``: fail a dispatched request that no step moved for this long while every model is up and
    that no model holds ready (HTTP 504; None: never)."""

    def __init__(self, frontend: FrontEnd, metrics: Metrics, stall_timeout_s: float | None) -> None:
        self.frontend = frontend
        self.metrics = metrics
        self.stall_timeout_s = stall_timeout_s
        self._steps_seen = -1  # the models' steps, all together, at the last probe
        self._moved_at = time.monotonic()  # when a probe last found that number changed

    def model_down(self, proc: int, why: str, *, restarting: bool) -> None:
        """Process ``proc`` died. While it restarts, every dispatched request it may hold is suspended (with
        replicas: those pinned to it; the others go on) and new ones wait; without a restart every request fails
        (HTTP 503)."""
        fe = self.frontend
        fe.down[proc] = why
        fe.kv_gate.forget(proc)
        if fe.pinning is not None:
            fe.pinning.forget_queue(proc)
        if not restarting:
            fe.restarting.discard(proc)
            fe.fail_all(f"model process {why}")
            return
        fe.restarting.add(proc)
        pinning = fe.pinning
        for gen in fe.generations.values():
            if gen.is_dispatched and not gen.is_suspended and (pinning is None or pinning.holds(gen, proc)):
                fe.broadcast(Abort(gen.request_id, gen.incarnation))
                gen.is_suspended = True

    def model_up(self, proc: int) -> None:
        """Process ``proc`` serves again; once every process does, the suspended requests resume."""
        fe = self.frontend
        fe.down.pop(proc, None)
        fe.restarting.discard(proc)
        if fe.down:
            return
        for gen in list(fe.generations.values()):
            if gen.is_suspended:
                self._resume(gen)
        fe.dispatch_waiting()
        fe.publish_counts()

    def _resume(self, gen: Generation) -> None:
        fe = self.frontend
        gen.is_suspended = False
        reason = gen.finish_reason()
        if reason is not None:  # its last token came before the crash; only the report of its end was lost
            fe.finish(gen, reason)
            return
        driven = fe.driven_entry
        model, msg = gen.resume(fe.num_models, fe.entry if driven is None else driven)
        gen.last_progress = time.monotonic()
        self.metrics.resumed.inc()
        if driven is not None:  # lockstep, per-token: process 0 serves every model; the message names the one to go on
            fe.send(fe.entry, replace(msg, extra={**msg.extra, RESUME_MODEL: model}))
        elif fe.pinning is None:
            fe.send(model if model in fe.mailbox.destinations else fe.entry, msg)
        else:  # every replica dropped what it held of the request: it is pinned afresh
            msg = fe.pinning.repin(gen, msg)
            fe.send(fe.pinning.process(gen, model), msg)

    async def watch(self) -> None:
        """Check for stalled requests about every second (forever; cancel the task to stop)."""
        while True:
            timeout = self.stall_timeout_s
            await asyncio.sleep(min(1.0, timeout / 4) if timeout else 1.0)
            if self.stale(time.monotonic()):
                queued, num_steps = await self.queued_ids()
                self.check_stalls(time.monotonic(), queued, num_steps)

    def stale(self, now: float) -> list[Generation]:
        """The dispatched requests no step moved for ``stall_timeout_s`` while every model was up."""
        fe, timeout = self.frontend, self.stall_timeout_s
        if timeout is None or fe.down:
            return []
        return [gen for gen in fe.generations.values() if gen.is_dispatched and now - gen.last_progress > timeout]

    async def queued_ids(self) -> tuple[frozenset[str], int]:
        """The requests the models that answer a probe hold ready to step (a wedged model answers none), and the
        steps they have made."""
        timeout = self.stall_timeout_s or 5.0
        states = await self.frontend.probe(timeout_s=min(5.0, timeout / 2))
        return frozenset(rid for state in states for rid in state.queued), sum(s.num_steps for s in states)

    def check_stalls(self, now: float, queued: frozenset[str] = frozenset(), num_steps: int = -1) -> None:
        """Fail (HTTP 504) every request no step moved for ``stall_timeout_s`` while all models were up (a lost
        message or a wedged model must not hold a client forever), unless a live model holds it ready (``queued``)
        and some model stepped within the timeout (``num_steps``, all models' steps, changed): then it waits its
        turn, for a batch or for KV memory that others' steps will free, as it would in vLLM."""
        timeout = self.stall_timeout_s
        if num_steps != self._steps_seen:
            self._steps_seen, self._moved_at = num_steps, now
        system_moves = timeout is not None and now - self._moved_at <= timeout
        for gen in self.stale(now):
            if gen.request_id in queued and system_moves:
                gen.last_progress = now
                continue
            log.error("front end: request %s made no progress for %g s; failing it", gen.request_id, timeout)
            self.metrics.stalled.inc()
            self.frontend.fail(
                gen, Failure(504, f"the request made no progress for {timeout:g} s (server.stall_timeout_s)")
            )
