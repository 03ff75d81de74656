"""What the front end does with the messages its subserver processes send: step reports (tokens, routes, finished
and failed requests), state answers and ``Ready``. A part of :class:`trserve.frontend.book.FrontEnd`, kept apart
so the book-keeping of admission and endings reads on its own."""

from __future__ import annotations

import logging
import time
from typing import Any

from trserve.frontend.generation import Failure, Generation
from trserve.runtime.messages import Failed, Finished, Ready, State, StepReport
from trserve.runtime.reports import touched_requests

log = logging.getLogger("trserve.frontend.book")


class Inbound:
    """Handles messages from the subservers for :class:`~trserve.frontend.book.FrontEnd` (the attributes and the
    ``fail`` / ``_end`` / ``connect`` / ``dispatch_waiting`` methods it uses are the front end's)."""

    generations: dict[str, Generation]

    async def _receive_forever(self) -> None:
        while True:
            msg = await self.mailbox.receive()
            try:
                self.handle(msg)
            except Exception:  # one bad message must not stop the front end, nor leave its requests hanging
                log.exception("front end: cannot handle %r", type(msg).__name__)
                self._fail_touched(msg)

    def _fail_touched(self, msg: Any) -> None:
        """Fail (HTTP 500) every request a message that could not be handled was about."""
        failure = Failure(500, f"internal error while handling a {type(msg).__name__} for this request")
        for rid in touched_requests(msg):
            gen = self.generations.get(rid)
            if gen is not None:
                try:
                    self.fail(gen, failure)
                except Exception:
                    log.exception("front end: cannot fail request %s", rid)

    def handle(self, msg: Any) -> None:
        if isinstance(msg, StepReport):
            self._on_step(msg)
        elif isinstance(msg, State):
            self.prober.on_state(msg)
        elif isinstance(msg, Ready):
            if msg.kv_capacity_tokens:
                self.kv_capacity[msg.model] = msg.kv_capacity_tokens
            waiter = self.ready_waiters.pop(msg.model, None)
            if waiter is not None and not waiter.done():  # only a worker being started may report an address
                if msg.address:
                    self.connect(msg.model, msg.address)
                waiter.set_result(msg)
        else:
            log.error("front end: unknown message %r", type(msg).__name__)

    def _on_step(self, report: StepReport) -> None:
        self.metrics.observe_step(report)
        if self.tuner is not None:
            self.tuner.on_step(report)
        if self.pinning is not None:
            self.pinning.on_report(report)
        if self.kv_gate.enabled:  # a report may release requests the gate held
            proc = report.model if self.pinning is None else self.pinning.table.proc(report.model, report.replica)
            self.kv_gate.on_report(proc, report.memory)
            if self.waiting:
                self.dispatch_waiting()
        now = time.monotonic()
        for rid, offset, tokens in report.tokens:
            gen = self.generations.get(rid)
            if gen is not None:
                self._deliver(gen, gen.accept(offset, tokens, report.model), now)
                if gen.done_reason:
                    self._end(gen, ("done", gen.done_reason), "finished")
        for rid, model, num_output, extra in report.routes:
            gen = self.generations.get(rid)
            if gen is not None:
                gen.note_route(model, num_output, extra)
                gen.last_progress = now
        for done in report.finished:
            self._on_finished(done, now, report.model)
        for failed in report.failed:
            self._on_failed(failed)

    def _deliver(self, gen: Generation, tokens: list[int], now: float) -> None:
        if not tokens:
            return
        gen.last_progress = now
        if gen.first_token_time is None:
            gen.first_token_time = now
            self.metrics.ttft_seconds.observe(now - gen.spec.arrival_time)
        gen.events.put_nowait(("tokens", tokens))

    def _on_finished(self, done: Finished, now: float, model: int = -1) -> None:
        """The request's last step, on ``model``, committed its last token; it ends once the tokens before are here
        (a peer that handed it over may not have reported yet), so each is credited to the model that wrote it."""
        gen = self.generations.get(done.request_id)
        if gen is None:
            return  # aborted meanwhile
        last = len(done.token_ids) - 1
        self._deliver(gen, gen.accept(last, done.token_ids[last:], model), now)
        gen.finishing = (gen.base + len(done.token_ids), done.reason)
        if gen.done_reason:
            self._end(gen, ("done", gen.done_reason), "finished")

    def _on_failed(self, failed: Failed) -> None:
        gen = self.generations.get(failed.request_id)
        if gen is not None and not gen.is_suspended:  # a suspended request's old incarnation is gone anyway
            self.fail(gen, Failure(503, failed.message))
