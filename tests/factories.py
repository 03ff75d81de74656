"""Shared factories for tests: request specs, client messages, step results, scripted programs, fake models."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from trcore import (
    CLIENT,
    Batch,
    BatchingPolicy,
    KVMemory,
    PeerReq,
    RequestSpec,
    Routing,
    RoutingProgram,
    StepResult,
    Subserver,
    new_request_message,
)


def make_spec(request_id: str = "r0", num_prompt_tokens: int = 3, max_tokens: int = 8, **kw: object) -> RequestSpec:
    return RequestSpec(request_id=request_id, num_prompt_tokens=num_prompt_tokens, max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


def make_arrival(
    request_id: str = "r0", prompt: Sequence[int] = (1, 2, 3), max_tokens: int = 8, num_models: int = 2, **kw: object
) -> PeerReq:
    spec = make_spec(request_id, len(prompt), max_tokens, **kw)
    return new_request_message(spec, prompt, num_models)


def make_step(token_ids: Sequence[int], request_ids: Sequence[str] = (), **signals: object) -> StepResult:
    return StepResult(token_ids=list(token_ids), request_ids=list(request_ids), **signals)  # type: ignore[arg-type]


class ScriptedProgram(RoutingProgram):
    """Routes by a fixed script: ``script[request_id]`` is a list of (destination, kept) per step here."""

    name = "scripted"

    def __init__(
        self,
        model: int,
        num_models: int,
        script: dict[str, list[tuple[int, bool]]] | None = None,
        default: int | None = None,
    ) -> None:
        super().__init__(model, num_models)
        self.script = script or {}
        self.default = model if default is None else default

    def route(self, step: StepResult) -> Routing:
        dests, keep = [], []
        for rid in step.request_ids:
            moves = self.script.get(rid)
            dest, kept = moves.pop(0) if moves else (self.default, True)
            dests.append(dest)
            keep.append(kept)
        return Routing(dests, keep)


def make_subserver(
    model: int = 0, num_models: int = 2, threshold: int = 1, program: RoutingProgram | None = None, **policy: object
) -> Subserver:
    program = program or ScriptedProgram(model, num_models)
    return Subserver(program, BatchingPolicy(threshold=threshold, **policy), record_trace=True)  # type: ignore[arg-type]


# --- Deterministic fake models and a synchronous multi-model loop (anchor and trace tests) -------------------


class HashModel:
    """The core tests' stand-in model: ``step(batch) -> StepResult`` at the level of ``trcore`` (no engine items;
    the serving stand-in implementing the engine protocol is ``trserve.engine.hash.HashEngine``). It is a
    deterministic stand-in for model ``model``: its next-token distribution is a hash of (model, the full
    sequence it has consumed). It keeps its own "KV cache" per request, built only from the suffixes it is fed
    (``token_ids[anchor:]``), so a wrong anchor shows up as a wrong token, as it would in a real engine."""

    def __init__(self, model: int, vocab: int = 64, top_k: int = 4) -> None:
        self.model, self.vocab, self.top_k = model, vocab, top_k
        self.kv: dict[str, list[int]] = {}

    def predict(self, seq: Sequence[int]) -> tuple[int, dict[int, float]]:
        """Greedy token and top-k logprobs after ``seq``; one hidden outcome keeps a tail mass."""
        digest = hashlib.blake2b(repr((self.model, tuple(seq))).encode(), digest_size=16).digest()
        base, sharpness = digest[0] % self.vocab, 0.5 + digest[1] % 8
        logits = [sharpness * b / 255 for b in digest[2 : 3 + self.top_k]]  # top_k shown + 1 hidden
        log_total = math.log(sum(math.exp(x) for x in logits))
        top = {(base + 5 * i) % self.vocab: logits[i] - log_total for i in range(self.top_k)}
        return max(top, key=lambda t: top[t]), top

    def step(self, batch: Batch) -> StepResult:
        tokens, tops = [], []
        for req, num_new in zip(batch.requests, batch.num_new_tokens, strict=True):
            cache = self.kv.setdefault(req.request_id, [])
            cache.extend(req.token_ids[len(req.token_ids) - num_new :])
            token, top = self.predict(cache)
            tokens.append(token)
            tops.append(top)
        return StepResult(token_ids=tokens, top_logprobs=tops, request_ids=batch.request_ids)


def run_system(
    programs: Sequence[RoutingProgram],
    arrivals: Sequence[PeerReq],
    engines: Sequence[HashModel],
    thresholds: Sequence[int] | None = None,
    max_wait_s: float | None = None,
    max_steps: int = 100_000,
    memories: Sequence[KVMemory | None] | None = None,
) -> tuple[dict[str, tuple[int, ...]], list[Subserver]]:
    """Drive one Subserver per program with a synchronous loop (each step takes one time unit, hand-offs are
    delivered at once; when no model can launch, time jumps to the earliest max-wait deadline) until every
    request finished; returns each request's output and the subservers. With ``memories``, each model accounts
    KV and the fake engine forgets what a batch evicts, so a wrong recompute shows up as a wrong token."""
    memories = memories or [None] * len(programs)
    subs = [
        Subserver(p, BatchingPolicy(threshold=b, max_wait_s=max_wait_s), record_trace=True, memory=mem)
        for p, b, mem in zip(programs, thresholds or [1] * len(programs), memories, strict=True)
    ]
    now = 0.0
    for msg in arrivals:
        subs[0].receive(msg, now)
    outputs: dict[str, tuple[int, ...]] = {}
    for _ in range(max_steps):
        if len(outputs) == len(arrivals):
            return outputs, subs
        launched = False
        for sub, engine in zip(subs, engines, strict=True):
            sub.num_active = len(arrivals) - len(outputs)
            batch = sub.launch(now)
            if sub.take_unservable():
                raise AssertionError("a request cannot fit in the KV cache")
            if batch is None:
                continue
            for rid in batch.evicted:
                engine.kv.pop(rid, None)
            launched = True
            now += 1.0
            for dest, msg in sub.complete(batch, engine.step(batch), now):
                if dest == CLIENT:
                    outputs[msg.request_id] = msg.token_ids
                else:
                    subs[dest].receive(msg, now)
        deadlines = [d for d in (sub.next_deadline() for sub in subs) if d is not None]
        if not launched and not deadlines:
            raise AssertionError("deadlock: no model could launch")
        if not launched:
            now = max(now, min(deadlines))
    raise AssertionError("requests did not finish")


def reference_run(
    engines: Sequence[HashModel],
    prompt: Sequence[int],
    decisions: Sequence[tuple[int, bool]],
    max_tokens: int,
    stop_token_ids: frozenset[int] = frozenset(),
) -> tuple[tuple[int, ...], list[tuple[int, int, bool]]]:
    """One request, one sequence, no anchors: apply per-step decisions (destination, kept) in order (then
    "stay, keep"); a dropped token is regenerated by the destination from the same sequence. Returns the
    output and the steps taken as (model, destination, kept)."""
    seq, model, steps = list(prompt), 0, []
    while True:
        token, _ = engines[model].predict(seq)
        dest, kept = decisions[len(steps)] if len(steps) < len(decisions) else (model, True)
        steps.append((model, dest, kept))
        if kept:
            seq.append(token)
            output = tuple(seq[len(prompt) :])
            if len(output) >= max_tokens or token in stop_token_ids:
                return output, steps
        model = dest
