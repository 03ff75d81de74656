"""Timing one model's steps on a running :class:`~trserve.engine.step_engine.StepEngine`, following a calibration plan.

Latency is the wall time of ``StepEngine.step`` (what the server's loop waits for); the process CPU time is kept
beside it, so a profile shows how much of the wall time was spent waiting for a core on a shared machine. Cells
are interleaved round by round, so slow moments of the machine spread over all cells instead of one. Every
prompt is random text-token ids: distinct per request, so neither the prefix cache nor shared KV blocks make a
step cheaper than the server's (shared blocks make decode attention markedly cheaper on CPU), except the base
prompts of extend and hand-off cells, which are re-used on purpose so their set-up step is cheap.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from trserve.calibrate.plan import (
    SETUP_STEP_TOKENS,
    CalibrationPlan,
    DecodeLevel,
    ExtendCell,
    RetryPolicy,
    recomputed_tokens,
)
from trserve.engine.handoff import handoff_mode
from trserve.engine.step_engine import StepEngine
from trserve.engine.types import StepItem, TokenOut

#: Ordinary text-token ids of the SmolLM2 vocabulary (any model's vocabulary is at least this large here).
TEXT_TOKENS = (200, 10_000)

Report = Callable[[int, int, str], None]
#: (batch size, context, extend) of a cell, or of a step's exact features.
Cell = tuple[int, int, int]


class Meter:
    """Steps the engine, times each step, and reports progress (steps done, steps to run, what runs now); timed
    steps that waited for a core are taken again as ``retries`` decides."""

    def __init__(self, engine: StepEngine, total: int, report: Report, retries: RetryPolicy) -> None:
        self.engine, self.total, self.report, self.retries = engine, total, report, retries
        self.done, self.label = 0, ""
        self.retry_steps = self._attempt_start = 0

    def step(self, items: list[StepItem]) -> tuple[list[TokenOut], float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        outs = self.engine.step(items)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.done += 1
        self.report(self.done, self.total + self.retry_steps, self.label)
        return outs, wall, cpu

    def begin_attempt(self) -> None:
        self._attempt_start = self.done

    def retry(self, attempt: int, *timings: tuple[float, float]) -> bool:
        """Whether to take this attempt's steps again (its timed steps' ``(wall, cpu)`` say one waited)."""
        if self.retries.should_retry(attempt, timings):
            self.retry_steps += self.done - self._attempt_start
            return True
        return False

    def summary(self) -> dict[str, Any]:
        return {"planned": self.total, "run": self.done, "retried_steps": self.retry_steps, **self.retries.summary()}


class Recorder:
    """Raw measurements: one record per timed step (``samples``: decode and extend cells; ``handoff``)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.samples: list[dict[str, Any]] = []
        self.handoff: list[dict[str, Any]] = []

    def sample(self, kind: str, cell: Cell, features: Cell, wall: float, cpu: float) -> None:
        """One timed step of ``cell`` (batch size, nominal context, extend) with its exact batch features."""
        b, ctx, ext = cell
        batch_size, context_tokens, extend_tokens = features
        self.samples.append(
            {"kind": kind, "cell": {"batch_size": b, "context": ctx, "extend": ext}, "batch_size": batch_size,
             "context_tokens": context_tokens, "extend_tokens": extend_tokens, "latency_s": wall, "cpu_s": cpu}
        )  # fmt: skip


class Prompts:
    """Random text-token prompts from one seeded generator; base prompts are fixed per (context, slot)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._bases: dict[tuple[int, int], list[int]] = {}

    def fresh(self, n: int) -> list[int]:
        return [self.rng.randrange(*TEXT_TOKENS) for _ in range(n)]

    def base(self, context: int, slot: int) -> list[int]:
        key = (context, slot)
        if key not in self._bases:
            self._bases[key] = self.fresh(context)
        return self._bases[key]


def run_plan(engine: StepEngine, plan: CalibrationPlan, report: Report, check_waits: bool = True) -> dict[str, Any]:
    """Run every cell of ``plan``; returns ``{"samples": [...], "handoff": [...], "steps": {...}}`` (raw records).
    ``check_waits``: retry steps that waited for a core (CPU placements; CPU time means nothing next to a GPU)."""
    grid = plan.grid
    limit = grid.max_wall_over_cpu if check_waits and grid.max_wall_over_cpu else None
    meter = Meter(engine, plan.num_steps, report, RetryPolicy(limit, grid.max_tries, plan.num_steps // 2))
    rec, prompts = Recorder(engine.config.block_size), Prompts(grid.seed)
    for level in plan.decode:
        _decode_level(meter, rec, level, grid.warmup, grid.rounds, prompts)
    for rnd in range(grid.rounds):
        timed = rnd >= grid.warmup
        for cell in plan.extend:
            _extend_cell(meter, rec, cell, rnd, timed, prompts)
        for ctx in plan.handoff_contexts:
            _handoff_pair(meter, rec, ctx, grid.handoff_peer_tokens, rnd, timed, prompts)
    return {"samples": rec.samples, "handoff": rec.handoff, "steps": meter.summary()}


def _decode_level(meter: Meter, rec: Recorder, level: DecodeLevel, warmup: int, rounds: int, prompts: Prompts) -> None:
    """Prefill ``num_requests`` distinct prompts once, then step rotating subsets of each batch size."""
    ctx, n = level.context, level.num_requests
    ids = [f"cal-d{ctx}-{k}" for k in range(n)]
    held: dict[str, int] = {}
    last: dict[str, int] = {}
    try:
        per_step = max(1, SETUP_STEP_TOKENS // ctx)
        meter.label = f"prefill {n} x {ctx} tokens"
        for start in range(0, n, per_step):
            chunk = ids[start : start + per_step]
            outs, _, _ = meter.step([StepItem(rid, prompts.fresh(ctx)) for rid in chunk])
            for rid, out in zip(chunk, outs, strict=True):
                held[rid], last[rid] = ctx, out.token_id
        offset = 0
        for rnd in range(rounds):
            for b in level.batch_sizes:
                meter.label = f"decode batch {b}, context {ctx}"
                for attempt in itertools.count():
                    meter.begin_attempt()
                    chosen = [ids[(offset + k) % n] for k in range(b)]
                    offset = (offset + b) % n
                    context_tokens = sum(held[rid] + 1 for rid in chosen)
                    outs, wall, cpu = meter.step([StepItem(rid, [last[rid]]) for rid in chosen])
                    for rid, out in zip(chosen, outs, strict=True):
                        held[rid], last[rid] = held[rid] + 1, out.token_id
                    if rnd < warmup or not meter.retry(attempt, (wall, cpu)):
                        break
                if rnd >= warmup:
                    rec.sample("decode", (b, ctx, 0), (b, context_tokens, 0), wall, cpu)
    finally:
        for rid in ids:
            meter.engine.release(rid)


def _extend_cell(meter: Meter, rec: Recorder, cell: ExtendCell, rnd: int, timed: bool, prompts: Prompts) -> None:
    """``batch_size`` requests holding ``context`` tokens (a prefix-cached base prompt) each get ``extend`` + 1
    tokens: the decode token and ``extend`` appended ones; context 0 is a fresh prompt of ``extend`` + 1."""
    b, ctx, ext = cell.batch_size, cell.context, cell.extend
    meter.label = f"extend {ext} tokens, batch {b}, context {ctx}"
    for attempt in itertools.count():
        meter.begin_attempt()
        wall, cpu = _extend_once(meter, cell, [f"cal-e{rnd}.{attempt}-{b}-{ctx}-{ext}-{k}" for k in range(b)], prompts)
        if not timed or not meter.retry(attempt, (wall, cpu)):
            break
    if timed:
        rec.sample("extend", (b, ctx, ext), (b, b * (ctx + ext + 1), b * ext), wall, cpu)


def _extend_once(meter: Meter, cell: ExtendCell, ids: list[str], prompts: Prompts) -> tuple[float, float]:
    ctx, ext = cell.context, cell.extend
    try:
        if ctx == 0:
            items = [StepItem(rid, prompts.fresh(ext + 1)) for rid in ids]
        else:
            outs, _, _ = meter.step([StepItem(rid, prompts.base(ctx, k)) for k, rid in enumerate(ids)])
            items = [StepItem(rid, [out.token_id, *prompts.fresh(ext)]) for rid, out in zip(ids, outs, strict=True)]
        _, wall, cpu = meter.step(items)
        return wall, cpu
    finally:
        for rid in ids:
            meter.engine.release(rid)


@contextlib.contextmanager
def using_handoff(engine: StepEngine, name: str) -> Iterator[None]:
    """Run requests under another hand-off strategy on the same engine (each request must be created and
    released inside), so both strategies are timed on one engine and share the machine's state."""
    saved = engine.mode
    engine.mode = handoff_mode(name, engine.config.top_logprobs)
    try:
        yield
    finally:
        engine.mode = saved


def _handoff_pair(meter: Meter, rec: Recorder, ctx: int, peer: int, rnd: int, timed: bool, prompts: Prompts) -> None:
    """One request per strategy at ``ctx`` tokens: a decode step, then the return step of a hand-off that
    brings ``peer`` tokens (the request's own last token is re-sent with them, as the anchors say)."""
    modes = ("session", "readmit") if rnd % 2 == 0 else ("readmit", "session")
    for mode in modes:
        meter.label = f"hand-off ({mode}), context {ctx}"
        for attempt in itertools.count():
            meter.begin_attempt()
            decode, back = _handoff_once(meter, f"cal-h{rnd}.{attempt}-{ctx}-{mode}", mode, ctx, peer, prompts)
            if not timed or not meter.retry(attempt, decode, back):
                break
        if timed:
            _handoff_record(rec, ctx, peer, mode, "decode", (ctx + 1, 0), *decode)
            _handoff_record(rec, ctx, peer, mode, "return", (ctx + peer + 2, peer), *back)


def _handoff_once(
    meter: Meter, rid: str, mode: str, ctx: int, peer: int, prompts: Prompts
) -> tuple[tuple[float, float], tuple[float, float]]:
    with using_handoff(meter.engine, mode):
        try:
            outs, _, _ = meter.step([StepItem(rid, prompts.base(ctx, 0))])
            outs, wall, cpu = meter.step([StepItem(rid, [outs[0].token_id])])
            _, back_wall, back_cpu = meter.step([StepItem(rid, [outs[0].token_id, *prompts.fresh(peer)])])
            return (wall, cpu), (back_wall, back_cpu)
        finally:
            meter.engine.release(rid)


def _handoff_record(
    rec: Recorder, ctx: int, peer: int, mode: str, step: str, tokens: tuple[int, int], wall: float, cpu: float
) -> None:
    seq_len, extend = tokens
    computed = extend + 1 if mode == "session" else recomputed_tokens(seq_len, rec.block_size)
    rec.handoff.append(
        {"context": ctx, "peer_tokens": peer, "mode": mode, "step": step, "context_tokens": seq_len,
         "extend_tokens": extend, "computed_tokens": computed, "latency_s": wall, "cpu_s": cpu}
    )  # fmt: skip
