"""An engine-only worker for the lockstep baseline: ``python -m trserve.baselines.engine_worker RUN_JSON INDEX``.

Worker ``INDEX`` hosts model ``INDEX - 1``'s step engine and runs exactly the steps the lockstep driver
(process 0) asks for, one at a time; it has no scheduler of its own.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from trcore.memory import KVBudget
from trserve.engine.types import Engine, EngineStepError, StepItem
from trserve.runtime.memory_setup import kv_budget_of
from trserve.runtime.messages import Abort, Probe, Ready, Release, Rewire, Shutdown, State, StepCall, StepReply
from trserve.runtime.reports import emulated_fields, rss_bytes
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND
from trserve.runtime.worker import start_engine, worker_main

log = logging.getLogger(__name__)
DRIVER = 0


def step_reply(engine: Engine, call: StepCall) -> StepReply:
    if not call.items:
        return StepReply(call.call_id, [], 0.0, engine.kv_usage(), kv_budget=budget_fields(kv_budget_of(engine)))
    started = time.perf_counter()
    try:
        outs = engine.step([StepItem(rid, tokens, sampling) for rid, tokens, sampling in call.items])
    except EngineStepError as exc:
        return StepReply(call.call_id, [], 0.0, engine.kv_usage(), error=str(exc))
    step_s = time.perf_counter() - started
    outputs = [(int(o.token_id), dict(o.top_logprobs), o.entropy) for o in outs]
    return StepReply(call.call_id, outputs, step_s, engine.kv_usage(), **emulated_fields(engine))


def budget_fields(budget: KVBudget | None) -> tuple[int, int, int] | None:
    """``budget`` as :attr:`StepReply.kv_budget` carries it."""
    return None if budget is None else (budget.num_blocks, budget.block_size, budget.max_seqs or 0)


class EngineHost:
    """What an engine-only worker does with each message. It remembers the requests it has stepped and not
    released, so that a driver's first call (its budget query: a call with no items, sent once before its first
    step) frees what the engine still holds: a restarted driver knows none of it (the front end resumes those
    requests as fresh ones), and a step call the dead driver sent just before it died may be read after the front
    end's aborts, leaving blocks that no one would release (the pool then overcommits and steps fail)."""

    def __init__(self, engine: Engine, mailbox: Any, model: int) -> None:
        self.engine = engine
        self.mailbox = mailbox
        self.model = model
        self.held: set[str] = set()
        self.num_steps = 0

    def handle(self, msg: Any) -> bool:
        """Act on one message; False when it says to shut down."""
        engine = self.engine
        if isinstance(msg, StepCall):
            if not msg.items:
                self.release(list(self.held))  # a new driver: whatever is held belonged to one before it
            self.held.update(item[0] for item in msg.items)
            self.mailbox.send(DRIVER, step_reply(engine, msg))
            self.num_steps += 1
        elif isinstance(msg, Release | Abort):
            self.release(msg.request_ids if isinstance(msg, Release) else [msg.request_id])
        elif isinstance(msg, Probe):
            resident = int(getattr(engine, "num_resident", len(getattr(engine, "kv", {}))))
            self.mailbox.send(FRONTEND, State(self.model, msg.token, os.getpid(), resident, 0, engine.kv_usage(),
                                              rss_bytes(), self.num_steps))  # fmt: skip
        elif isinstance(msg, Shutdown):
            return False
        elif isinstance(msg, Rewire):
            self.mailbox.rewire(msg.model, msg.address)
        return True

    def release(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.engine.release(rid)
            self.held.discard(rid)


def run(spec: RunSpec, index: int) -> None:
    model = index - 1
    engine = start_engine(spec, model)
    try:
        mailbox = spec.endpoints.mailbox(index)
        signals = tuple(sorted(engine.available_signals))
        budget = kv_budget_of(engine)
        capacity = budget.capacity_tokens if budget is not None and spec.config.memory.policy != "off" else 0
        ready = Ready(index, os.getpid(), engine.kv_usage(), signals, mailbox.address, kv_capacity_tokens=capacity)
        mailbox.send(FRONTEND, ready)
        parent = os.getppid()
        host = EngineHost(engine, mailbox, model)
        while os.getppid() == parent:
            for msg in mailbox.receive_all(1.0):
                if not host.handle(msg):
                    return
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(worker_main(run))
