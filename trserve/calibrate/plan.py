"""What ``tokenrouter calibrate`` measures on one model: the grid, its validation, and the plan of cells that fit
the model's batch limit, context limit and KV cache (pure: no engine, no clock)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trcore.errors import ConfigError

#: Tokens fed in one untimed set-up step (prefilling the prompts a decode level needs).
SETUP_STEP_TOKENS = 2048


@dataclass(frozen=True)
class CalibrationGrid:
    """The cells to time. Decode: ``batch_sizes`` x ``contexts`` (tokens per request; None = powers of two up to
    the model's max batch, and the max batch itself), cells of more than ``max_cell_tokens`` context tokens left
    out (each needs that many distinct prompt tokens prefilled). Extend: ``extend`` tokens appended per request
    (beyond the one decode token) to requests holding ``extend_contexts`` tokens (0 = a fresh prompt), in
    batches of ``extend_batch_sizes``, at most ``max_extend_tokens`` fed per step. Hand-off: a return step
    bringing ``handoff_peer_tokens`` at about each of ``handoff_contexts``, kept session vs readmit. Every cell is
    timed ``repeats`` times after ``warmup`` untimed rounds. On CPU, a timed step whose wall time exceeds
    ``max_wall_over_cpu`` x its CPU time waited for its core and is taken again (``max_tries`` in all)."""

    batch_sizes: tuple[int, ...] | None = None
    contexts: tuple[int, ...] = (64, 256, 1024)
    extend: tuple[int, ...] = (4, 32, 256)
    extend_contexts: tuple[int, ...] = (0, 256)
    extend_batch_sizes: tuple[int, ...] = (1, 4)
    handoff_contexts: tuple[int, ...] = (256, 1024)
    handoff_peer_tokens: int = 4
    repeats: int = 5
    warmup: int = 1
    max_cell_tokens: int = 8192
    max_extend_tokens: int = 512
    max_wall_over_cpu: float = 1.25
    max_tries: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        lists = {"batch_sizes": 1, "contexts": 1, "extend": 1, "extend_contexts": 0, "extend_batch_sizes": 1}
        for name, low in {**lists, "handoff_contexts": 1}.items():
            values = getattr(self, name)
            if values is None:
                continue
            if not values:
                raise ConfigError(name, "needs at least one value")
            if any(v < low for v in values):
                raise ConfigError(name, f"values must be >= {low}, got {list(values)}")
        for name in ("repeats", "handoff_peer_tokens", "max_cell_tokens", "max_extend_tokens", "max_tries"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.max_wall_over_cpu and self.max_wall_over_cpu <= 1:
            raise ConfigError("max_wall_over_cpu", f"must be > 1 (or 0: keep every step), got {self.max_wall_over_cpu}")
        if self.warmup < 0:
            raise ConfigError("warmup", f"must be >= 0, got {self.warmup}")

    @property
    def rounds(self) -> int:
        return self.warmup + self.repeats

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


#: ``--quick``: a few cells per kind, two repeats (a smoke run of a minute or two per model).
QUICK_GRID = CalibrationGrid(
    batch_sizes=(1, 2, 4, 8),
    contexts=(32, 128),
    extend=(8, 64),
    extend_contexts=(0, 128),
    extend_batch_sizes=(1, 2),
    handoff_contexts=(128,),
    repeats=2,
    max_cell_tokens=1024,
    max_extend_tokens=256,
)


def grid_from_options(quick: bool, **overrides: Any) -> CalibrationGrid:
    """The default (or ``--quick``) grid with the options the user gave (None = keep the default)."""
    base = QUICK_GRID if quick else CalibrationGrid()
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given)


def default_batch_sizes(max_batch: int) -> tuple[int, ...]:
    sizes = [1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch]
    return tuple(sorted({*sizes, max_batch}))


def check_grid_for_model(
    grid: CalibrationGrid, model: str, max_batch: int, max_model_len: int, fields: Collection[str]
) -> None:
    """Reject values of ``fields`` (those the user chose) that no step of this model can have, before any engine
    starts; default values that do not fit a model are skipped by the plan instead."""
    too_big = [b for b in grid.batch_sizes or () if b > max_batch] if "batch_sizes" in fields else []
    if too_big:
        raise ConfigError("batch_sizes", f"{too_big} exceed model {model!r}'s max batch {max_batch}")
    for name, margin in (("contexts", 1), ("handoff_contexts", 1), ("extend_contexts", 1), ("extend", 2)):
        long = [c for c in getattr(grid, name) if c + margin > max_model_len] if name in fields else []
        if long:
            raise ConfigError(name, f"{long} do not fit model {model!r}'s max_model_len {max_model_len}")


@dataclass(frozen=True)
class DecodeLevel:
    """Requests prefilled to ``context`` tokens each, stepped in batches of ``batch_sizes``."""

    context: int
    batch_sizes: tuple[int, ...]

    @property
    def num_requests(self) -> int:
        return max(self.batch_sizes)


@dataclass(frozen=True)
class ExtendCell:
    batch_size: int
    context: int
    extend: int


@dataclass(frozen=True)
class CalibrationPlan:
    """The cells one model runs, and those left out with the reason."""

    grid: CalibrationGrid
    decode: tuple[DecodeLevel, ...]
    extend: tuple[ExtendCell, ...]
    handoff_contexts: tuple[int, ...]
    skipped: tuple[dict[str, Any], ...] = field(default=())

    @property
    def num_steps(self) -> int:
        """Engine steps the plan takes (timed, warm-up and set-up), for the progress bar."""
        rounds = self.grid.rounds
        steps = sum(rounds * len(lv.batch_sizes) + _setup_steps(lv) for lv in self.decode)
        steps += sum(rounds * (1 if c.context == 0 else 2) for c in self.extend)
        return steps + rounds * 6 * len(self.handoff_contexts)


def _setup_steps(level: DecodeLevel) -> int:
    per_step = max(1, SETUP_STEP_TOKENS // level.context)
    return -(-level.num_requests // per_step)


def make_plan(
    grid: CalibrationGrid, max_batch: int, max_model_len: int, kv_capacity_tokens: int, block_size: int = 32
) -> CalibrationPlan:
    """Cells of ``grid`` this model can run: decode contexts drift by one token per step taken, so a level keeps
    room for its drift; cells beyond ``max_cell_tokens`` or the KV cache (kept 10% free) are skipped. Hand-off
    contexts are moved within their KV block (:func:`handoff_context`)."""
    kv_room = int(kv_capacity_tokens * 0.9)
    skipped: list[dict[str, Any]] = []
    levels = []
    for ctx in grid.contexts:
        sizes = grid.batch_sizes or default_batch_sizes(max_batch)
        drift = grid.rounds * len(sizes)
        kept = []
        for b in sizes:
            reason = _decode_reason(b, ctx, drift, grid, max_model_len, kv_room)
            if reason:
                skipped.append({"kind": "decode", "batch_size": b, "context": ctx, "reason": reason})
            else:
                kept.append(b)
        if kept:
            levels.append(DecodeLevel(ctx, tuple(kept)))
    extend = []
    for ctx in grid.extend_contexts:
        for e in grid.extend:
            for b in grid.extend_batch_sizes:
                reason = _extend_reason(b, ctx, e, grid, max_batch, max_model_len, kv_room)
                if reason:
                    skipped.append({"kind": "extend", "batch_size": b, "context": ctx, "extend": e, "reason": reason})
                else:
                    extend.append(ExtendCell(b, ctx, e))
    shifted = (handoff_context(c, grid.handoff_peer_tokens, block_size) for c in grid.handoff_contexts)
    handoff = tuple(c for c in shifted if c + grid.handoff_peer_tokens + 4 <= max_model_len)
    return CalibrationPlan(grid, tuple(levels), tuple(extend), handoff, tuple(skipped))


def handoff_context(context: int, peer_tokens: int, block_size: int) -> int:
    """``context`` moved within its KV block so the return step's sequence ends half-way into a block: readmit
    then recomputes half a block, its average case (at a block boundary it would recompute almost nothing)."""
    ctx = (context // block_size) * block_size + block_size // 2 - peer_tokens - 2
    return ctx if ctx >= 1 else ctx + block_size * (-(-(1 - ctx) // block_size))


def recomputed_tokens(seq_len: int, block_size: int) -> int:
    """Tokens a readmitted sequence of ``seq_len`` recomputes: all after its last full cached block (vLLM
    computes at least one)."""
    return seq_len - ((seq_len - 1) // block_size) * block_size


def _decode_reason(b: int, ctx: int, drift: int, grid: CalibrationGrid, max_len: int, kv_room: int) -> str:
    if b * ctx > grid.max_cell_tokens:
        return f"{b * ctx} context tokens > max_cell_tokens {grid.max_cell_tokens}"
    if ctx + drift + 1 > max_len:
        return f"context {ctx} + {drift} decode steps > max_model_len {max_len}"
    if b * (ctx + drift + 1) > kv_room:
        return f"needs {b * (ctx + drift + 1)} KV tokens, the cache holds {kv_room} (90%)"
    return ""


def _extend_reason(b: int, ctx: int, e: int, grid: CalibrationGrid, max_batch: int, max_len: int, kv_room: int) -> str:
    if b > max_batch:
        return f"batch {b} > max batch {max_batch}"
    if b * (e + 1) > grid.max_extend_tokens:
        return f"{b * (e + 1)} tokens fed > max_extend_tokens {grid.max_extend_tokens}"
    if ctx + e + 2 > max_len:
        return f"context {ctx} + {e + 1} fed > max_model_len {max_len}"
    if b * (ctx + e + 2) > kv_room:
        return f"needs {b * (ctx + e + 2)} KV tokens, the cache holds {kv_room} (90%)"
    return ""


class RetryPolicy:
    """When a timed step is taken again: on a CPU placement, a step whose wall time exceeds ``wait_limit`` x its
    CPU time waited for its core (other work shared it). At most ``max_tries`` attempts per sample and ``budget``
    retries in all; a sample still contended after that is kept, and counted. ``wait_limit`` None: never retry."""

    def __init__(self, wait_limit: float | None, max_tries: int, budget: int) -> None:
        self.wait_limit, self.max_tries, self.budget = wait_limit, max_tries, budget
        self.num_retried = self.num_kept_contended = 0

    def should_retry(self, attempt: int, timings: Sequence[tuple[float, float]]) -> bool:
        """``attempt`` counts from 0; ``timings`` are the attempt's timed ``(wall_s, cpu_s)`` pairs."""
        limit = self.wait_limit
        if limit is None or all(wall <= limit * cpu for wall, cpu in timings):
            return False
        if attempt + 1 < self.max_tries and self.num_retried < self.budget:
            self.num_retried += 1
            return True
        self.num_kept_contended += 1
        return False

    def summary(self) -> dict[str, Any]:
        return {"retried_samples": self.num_retried, "kept_contended": self.num_kept_contended,
                "wall_over_cpu_limit": self.wait_limit, "max_tries": self.max_tries}  # fmt: skip
