"""A plain vLLM engine for the ``per-token`` baseline: ``python -m trserve.baselines.pertoken RUN_JSON INDEX``.

Worker ``INDEX`` serves model ``INDEX - 1`` the way standard serving does: every request is new (the whole
sequence as its prompt, one output token), the engine batches whatever is queued (continuous batching, free
running), and prefix caching gives back the KV blocks of sequences it saw before. Nothing is kept between tokens.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from trserve.engine.core_link import CoreLink, sampling_params, start_core
from trserve.engine.emulated import EmulatedLatency, wait_until
from trserve.engine.hash import hash_next
from trserve.engine.signals import EntropySink, top_logprobs_of
from trserve.runtime.messages import Abort, OneToken, Probe, Ready, Rewire, Shutdown, State, TokenReply
from trserve.runtime.reports import rss_bytes
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND
from trserve.runtime.worker import emulated_latency, engine_config, worker_main

log = logging.getLogger(__name__)
DISPATCHER = 0


class PlainEngine:
    """A free-running vLLM engine core fed one-token requests (in this process, like ``StepEngine``)."""

    def __init__(self, spec: RunSpec, model: int) -> None:

        self.config = engine_config(spec, model, handoff="readmit", enable_prefix_caching=True)
        self.sink = EntropySink()
        self.link = CoreLink(start_core(self.config, self.sink))
        self.pending: dict[str, tuple[OneToken, float]] = {}
        self.add(OneToken("__warmup__", 0, [0, 1, 2], {}))
        while self.pending:  # the first forward pass is slow; pay it before serving
            self.poll()

    def add(self, msg: OneToken) -> None:

        engine_id = f"{msg.request_id}#{msg.seq_no}"
        params = sampling_params(msg.sampling, self.config.top_logprobs, engine_id, seed_offset=len(msg.token_ids))
        self.link.add(engine_id, msg.token_ids, params, resumable=False)
        self.pending[engine_id] = (msg, time.perf_counter())

    def abort(self, request_id: str) -> None:
        gone = [eid for eid, (msg, _) in self.pending.items() if msg.request_id == request_id]
        for eid in gone:
            del self.pending[eid]
        self.link.abort([eid for eid in gone if self.link.holds(eid)])

    def poll(self) -> list[TokenReply]:
        """One engine iteration; the tokens it finished."""

        outputs, _ = self.link.step()
        entropies = self.sink.take()
        replies = []
        for out in outputs:
            entry = self.pending.pop(out.request_id, None)
            if entry is None or not out.new_token_ids:
                continue
            msg, started = entry
            top, _ = top_logprobs_of(out.new_logprobs, self.config.top_logprobs)
            latency = time.perf_counter() - started
            token = int(out.new_token_ids[0])
            replies.append(TokenReply(msg.request_id, msg.seq_no, token, top, entropies.get(out.request_id), latency))
        return replies

    def kv_usage(self) -> float:
        return self.link.kv_usage()

    def close(self) -> None:
        self.link.shutdown()


class HashPlainEngine:
    """``backend: hash`` and ``emulated``: the same interface, stateless (the whole sequence comes with every
    request); a step lasts what the routed engines' step would (``emulated``: the model's latency; ``hash``: 5 ms)."""

    def __init__(self, spec: RunSpec, model: int) -> None:
        self.model = model
        self.pending: dict[str, tuple[OneToken, float]] = {}
        emulated = spec.config.backend == "emulated"
        self.latency = emulated_latency(spec, model) if emulated else EmulatedLatency.by_batch_s(0.005)

    def add(self, msg: OneToken) -> None:
        self.pending[f"{msg.request_id}#{msg.seq_no}"] = (msg, time.perf_counter())

    def abort(self, request_id: str) -> None:
        self.pending = {k: v for k, v in self.pending.items() if v[0].request_id != request_id}

    def poll(self) -> list[TokenReply]:
        step_started = time.perf_counter()
        context = sum(len(msg.token_ids) for msg, _ in self.pending.values())
        outs = [hash_next(self.model, msg.token_ids) for msg, _ in self.pending.values()]
        wait_until(step_started + self.latency.step_s(len(self.pending), context))
        replies = []
        for (msg, started), out in zip(self.pending.values(), outs, strict=True):
            latency = time.perf_counter() - started
            replies.append(TokenReply(msg.request_id, msg.seq_no, out.token_id, out.top_logprobs, out.entropy, latency))
        self.pending.clear()
        return replies

    def kv_usage(self) -> float:
        return 0.0

    def close(self) -> None:
        self.pending.clear()


def run(spec: RunSpec, index: int) -> None:
    model = index - 1
    stand_in = spec.config.backend in ("hash", "emulated")
    engine: Any = HashPlainEngine(spec, model) if stand_in else PlainEngine(spec, model)
    try:
        mailbox = spec.endpoints.mailbox(index)
        mailbox.send(FRONTEND, Ready(index, os.getpid(), engine.kv_usage(), address=mailbox.address))
        parent, num_tokens = os.getppid(), 0
        while os.getppid() == parent:
            for msg in mailbox.receive_all(0 if engine.pending else 1.0):
                if isinstance(msg, OneToken):
                    engine.add(msg)
                elif isinstance(msg, Abort):
                    engine.abort(msg.request_id)
                elif isinstance(msg, Probe):
                    state = State(model, msg.token, os.getpid(), len(engine.pending), len(engine.pending),
                                  engine.kv_usage(), rss_bytes(), num_tokens)  # fmt: skip
                    mailbox.send(FRONTEND, state)
                elif isinstance(msg, Rewire):
                    mailbox.rewire(msg.model, msg.address)
                elif isinstance(msg, Shutdown):
                    return
            if engine.pending:
                for reply in engine.poll():
                    mailbox.send(DISPATCHER, reply)
                    num_tokens += 1
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(worker_main(run))
