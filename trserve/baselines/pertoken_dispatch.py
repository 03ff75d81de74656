"""The dispatcher of the ``per-token`` baseline: ``python -m trserve.baselines.pertoken_dispatch RUN_JSON 0``.

Standard serving plus an external router: every token of every request is a new one-token request to the plain
engine of the model the routing program chose (``trserve.baselines.pertoken``), carrying the whole sequence so
far. Requests never wait for each other here; each engine batches what it has. The routing decisions come from
the same ``trcore`` code as the routed server: each request gets its own single-request subserver per model
(threshold 1), sharing that model's routing program.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from trcore import CLIENT, Batch, BatchingPolicy, PeerReq, ProgramError, RoutingProgram, StepResult, Subserver
from trserve.runtime.messages import (
    Abort,
    Failed,
    OneToken,
    Probe,
    Ready,
    Rewire,
    Shutdown,
    State,
    StepReport,
    TokenReply,
    resume_model,
)
from trserve.runtime.reports import committed_tokens, failure_report, finished_message, resume_points, rss_bytes
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND
from trserve.runtime.worker import build_program, worker_main

log = logging.getLogger(__name__)
ONE_AT_A_TIME = BatchingPolicy(threshold=1, max_batch=1)


def engine_proc(model: int) -> int:
    return model + 1


@dataclass
class Flight:
    """One request in flight: its subservers (one per model), and the token request outstanding."""

    subs: list[Subserver]
    batch: Batch | None = None
    seq_no: int = 0
    output_before: int = 0
    num_sent: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Dispatcher:
    def __init__(self, programs: list[RoutingProgram], mailbox: Any, entry: int = 0) -> None:
        self.programs = programs
        self.mailbox = mailbox
        self.entry = entry
        self.flights: dict[str, Flight] = {}
        self.is_stopping = False
        self.num_tokens = 0

    def run(self) -> None:
        parent = os.getppid()
        while not self.is_stopping and os.getppid() == parent:
            for msg in self.mailbox.receive_all(1.0):
                self.handle(msg)

    def handle(self, msg: Any) -> None:
        if isinstance(msg, TokenReply):
            self._on_token(msg)
        elif isinstance(msg, PeerReq):
            if msg.spec is not None and not msg.is_finished:
                self._start(msg)
        elif isinstance(msg, Abort):
            self.flights.pop(msg.request_id, None)  # the engines drop it too (the front end tells everyone)
        elif isinstance(msg, Probe):
            # every flight is at an engine, in its queue or stepping: waiting its turn, not lost
            state = State(-1, msg.token, os.getpid(), len(self.flights), 0, 0.0, rss_bytes(), self.num_tokens,
                          queued=tuple(self.flights))  # fmt: skip
            self.mailbox.send(FRONTEND, state)
        elif isinstance(msg, Rewire):
            self.mailbox.rewire(msg.model, msg.address)
        elif isinstance(msg, Shutdown):
            self.is_stopping = True

    def _start(self, msg: PeerReq) -> None:
        """A request from the front end: a new one starts on the entry model; one resumed after a crash on the model
        its last step's route named (``RESUME_MODEL``), with that step's routing state, as in the routed mode."""
        flight = Flight([Subserver(p, ONE_AT_A_TIME) for p in self.programs])
        self.flights[msg.request_id] = flight
        model, msg = resume_model(msg, self.entry)
        flight.subs[model].receive(msg, time.monotonic())
        self._ask(msg.request_id, flight)

    def _ask(self, request_id: str, flight: Flight) -> None:
        now = time.monotonic()
        batch = next(b for b in (sub.launch(now) for sub in flight.subs) if b is not None)
        req = batch.requests[0]
        flight.batch, flight.seq_no, flight.output_before = batch, flight.seq_no + 1, req.num_output_tokens
        flight.num_sent = len(req.token_ids)
        sampling = dict(req.spec.sampling)
        self.mailbox.send(engine_proc(batch.model), OneToken(request_id, flight.seq_no, list(req.token_ids), sampling))

    def _on_token(self, reply: TokenReply) -> None:
        flight = self.flights.get(reply.request_id)
        if flight is None or flight.batch is None or reply.seq_no != flight.seq_no:
            return  # aborted meanwhile
        batch, model = flight.batch, flight.batch.model
        entropy = None if reply.entropy is None else [reply.entropy]
        step = StepResult([reply.token_id], [reply.top_logprobs], entropy, request_ids=[reply.request_id])
        now = time.monotonic()
        try:
            handoffs = flight.subs[model].complete(batch, step, now)
        except ProgramError as exc:  # a bug of the routing program: this request fails, the others go on
            flight.subs[model].fail(batch)
            del self.flights[reply.request_id]
            failed = [Failed(reply.request_id, str(exc))]
            self.mailbox.send(FRONTEND, failure_report(flight.subs[model], failed, 1))
            return
        self.num_tokens += 1
        finished, num_handoffs = [], 0
        for dest, msg in handoffs:
            if dest == CLIENT:
                finished.append(finished_message(msg, batch))
            else:
                num_handoffs += 0 if msg.is_finished else 1
                flight.subs[dest].receive(msg, now)
        done = {f.request_id for f in finished}
        tokens = committed_tokens(batch, [flight.output_before], done)
        routes = resume_points(batch, handoffs, done, flight.subs[model].program.moving_extra)
        report = StepReport(model, 1, flight.num_sent, reply.latency_s, 0, len(self.flights),
                            num_handoffs, 0.0, tokens=tokens, finished=finished, routes=routes)  # fmt: skip
        self.mailbox.send(FRONTEND, report)
        if finished:
            del self.flights[reply.request_id]
        else:
            self._ask(reply.request_id, flight)


def run(spec: RunSpec, index: int) -> None:
    programs = [build_program(spec, m) for m in range(spec.config.num_models)]
    mailbox = spec.endpoints.mailbox(index)
    mailbox.send(FRONTEND, Ready(index, os.getpid(), 0.0, address=mailbox.address))
    Dispatcher(programs, mailbox, entry=spec.config.entry_model).run()
    mailbox.close()


if __name__ == "__main__":
    sys.exit(worker_main(run))
