"""``backend: emulated``: the hash stand-in engine whose every step takes the time a latency model gives.

Only the forward pass is replaced: the step computes the hash tokens and routing signals of
:mod:`trserve.engine.hash` (so correctness checks still hold), then waits until the step has lasted exactly the
emulated latency of its batch. The wait sleeps most of the time and spins on ``time.perf_counter`` for the last
fraction of a millisecond, so steps are accurate to tens of microseconds while costing almost no CPU; the CPU the
spin does cost is counted (:attr:`EmulatedEngine.wait_cpu_s`) so a CPU budget can leave it out.

Latency sources (``models[i].emulated`` in the serve config, :class:`trserve.model_config.EmulatedConfig`): a
constant, a table by batch size, or a calibration profile's fit with its context and extend terms (optionally with
jitter drawn from the profile's measured spread).

With ``emulated.kv_tokens`` the engine has a KV block pool (:class:`~trcore.KVLedger` over the model's blocks): each
resident request holds the blocks of the tokens it was fed, ``release`` frees them, and a step that would need
more blocks (or sequence slots) than are free raises :class:`EngineStepError` naming the requests that grow, before
anything runs, so a scheduler that overcommits shows up. Recompute after a spill is an ordinary extend step (the
whole sequence fed again), priced by the latency model's extend term.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from trcore.errors import ConfigError
from trcore.memory import KVBudget, KVLedger
from trserve.engine.hash import HashEngine
from trserve.engine.types import EngineStepError, StepItem, TokenOut
from trserve.model_config import EmulatedConfig, ModelConfig
from trsim.latency import LatencyModel, TableModel
from trsim.profile import latency_from_profile, load_profile

#: The wait spins (instead of sleeping) for its last this-many seconds: ``time.sleep`` overshoots by ~0.1 ms.
SPIN_S = 3e-4
#: Context length (tokens per request) at which :meth:`EmulatedLatency.table` reads a profile (bench prompts).
TABLE_CONTEXT = 24


class EmulatedLatency:
    """Step latency (seconds) of one emulated model: a ``trsim`` latency model (a table by batch size for
    ``latency_ms``, the nearest entry beyond its ends; a profile's fit otherwise) and ``jitter``, the relative
    half-width of a uniform draw around it."""

    def __init__(self, model: LatencyModel, jitter: float = 0.0, seed: int = 0) -> None:
        self.model = model
        self.jitter = jitter
        self.rng = random.Random(seed)

    @classmethod
    def by_batch_s(cls, *table_s: float) -> EmulatedLatency:
        """Latency by batch size from 1 (seconds); the last value holds beyond the end."""
        return cls(TableModel(list(range(1, len(table_s) + 1)), list(table_s)))

    @classmethod
    def from_config(cls, cfg: EmulatedConfig, seed: int = 0) -> EmulatedLatency:
        """The latency of ``cfg`` (``models[i].emulated``); an unreadable profile is a ConfigError."""
        if cfg.latency_ms is not None:
            values = cfg.latency_ms if isinstance(cfg.latency_ms, list) else [cfg.latency_ms]
            return cls.by_batch_s(*(v / 1000.0 for v in values))
        path = Path(str(cfg.profile)).expanduser()
        try:
            profile = load_profile(path)
        except (OSError, ValueError) as exc:
            raise ConfigError("emulated.profile", f"cannot read {path}: {str(exc).splitlines()[0]}") from None
        spread = float(((profile.calibration or {}).get("spread") or {}).get("median_spread") or 0.0)
        return cls(latency_from_profile(profile), jitter=spread / 2 if cfg.jitter else 0.0, seed=seed)

    def mean_s(self, batch_size: int, context_tokens: int = 0, extend_tokens: int = 0) -> float:
        """The latency without jitter."""
        return max(0.0, float(self.model.predict(batch_size, context_tokens, extend_tokens)))

    def step_s(self, batch_size: int, context_tokens: int = 0, extend_tokens: int = 0) -> float:
        """One step's latency: the mean, times a uniform draw in ``1 ± jitter``."""
        mean = self.mean_s(batch_size, context_tokens, extend_tokens)
        return mean * (1.0 + self.rng.uniform(-self.jitter, self.jitter)) if self.jitter else mean

    def table(self, max_batch: int, context_per_request: int = TABLE_CONTEXT) -> list[float]:
        """Mean latency by batch size 1..``max_batch`` (what the throughput model and the simulator are fed)."""
        return [self.mean_s(b, b * context_per_request) for b in range(1, max_batch + 1)]


def wait_until(deadline: float) -> None:
    """Return at ``deadline`` (a ``time.perf_counter`` reading): sleep, then spin the last :data:`SPIN_S`."""
    remaining = deadline - time.perf_counter()
    if remaining > SPIN_S:
        time.sleep(remaining - SPIN_S)
    while time.perf_counter() < deadline:
        pass


class EmulatedEngine(HashEngine):
    """Hash tokens at emulated speed. After each step, ``last_emulated_s`` is the latency the step was given
    and ``last_actual_s`` what it took; ``last_wait_cpu_s`` is the CPU its wait cost (the spin), ``wait_cpu_s``
    the total.

    Like a GPU engine it steps without the host (:class:`~trserve.engine.types.OverlappingEngine`): ``start``
    computes the step and returns, ``finish`` waits out its latency; with ``overlaps`` (``emulated.overlap``) the
    loop uses the wait for the previous step's report. With ``pool`` (a budget) its KV is a block pool (module
    docstring); without, memory is free and ``capacity_tokens`` only scales :meth:`kv_usage`."""

    def __init__(
        self,
        model: int,
        latency: EmulatedLatency,
        capacity_tokens: int = 1 << 20,
        overlaps: bool = True,
        pool: KVBudget | None = None,
    ) -> None:
        super().__init__(model, step_s=0.0, capacity_tokens=pool.capacity_tokens if pool else capacity_tokens)
        self.latency = latency
        self.overlaps = overlaps
        self.pool = KVLedger(pool) if pool is not None else None
        self.last_emulated_s = 0.0
        self.last_actual_s = 0.0
        self.wait_cpu_s = 0.0
        self.last_wait_cpu_s = 0.0
        self._started = 0.0
        self._outs: list[TokenOut] | None = None

    @classmethod
    def from_model_config(cls, model: int, cfg: ModelConfig, seed: int = 0) -> EmulatedEngine:
        """Model ``model``'s engine from its config section (``emulated`` settings, block size, sequence limit)."""
        if cfg.emulated is None:
            raise ConfigError(f"models.{model}.emulated", "is required with backend: emulated")
        latency = EmulatedLatency.from_config(cfg.emulated, seed=seed)
        return cls(model, latency, overlaps=cfg.emulated.overlap, pool=pool_budget(cfg))

    def kv_budget(self) -> KVBudget | None:
        """The block pool as the core accounts it (None without a pool: memory is free)."""
        return self.pool.budget if self.pool is not None else None

    def kv_usage(self) -> float:
        if self.pool is None:
            return super().kv_usage()
        return self.pool.num_used / self.pool.budget.num_blocks

    def release(self, request_id: str) -> None:
        super().release(request_id)
        if self.pool is not None:
            self.pool.free(request_id)

    def step(self, items: Sequence[StepItem]) -> list[TokenOut]:
        self.start(items)
        return self.finish()

    def start(self, items: Sequence[StepItem]) -> None:
        """Launch a step: its tokens are computed now, its latency runs from now."""
        if self._outs is not None:
            raise RuntimeError("start() while a step is running: finish() it first")
        started = time.perf_counter()
        if self.pool is not None:
            self._reserve(items)
        extend = sum(max(0, len(item.new_token_ids) - 1) for item in items)
        self._outs = super().step(items)
        context = sum(len(self.kv[item.request_id]) for item in items)
        self.last_emulated_s = self.latency.step_s(len(items), context, extend)
        self._started = started

    def _reserve(self, items: Sequence[StepItem]) -> None:
        """Take the blocks the step's requests grow into, or raise (nothing reserved) naming those that grow."""
        pool = self.pool
        assert pool is not None
        targets = {item.request_id: len(self.kv.get(item.request_id, ())) + len(item.new_token_ids) for item in items}
        need = sum(pool.extra_blocks(rid, n) for rid, n in targets.items())
        new_seqs = sum(1 for rid in targets if not pool.holds(rid))
        max_seqs = pool.budget.max_seqs
        if need > pool.num_free or (max_seqs is not None and pool.num_seqs + new_seqs > max_seqs):
            culprits = {
                rid: f"needs {pool.extra_blocks(rid, n)} more KV block(s) for {n} tokens"
                for rid, n in targets.items()
                if pool.extra_blocks(rid, n)
            }
            free, total = pool.num_free, pool.budget.num_blocks
            raise EngineStepError(
                f"model {self.model}: the step needs {need} KV blocks and {new_seqs} new sequence(s); {free} of "
                f"{total} blocks free, {pool.num_seqs} of {max_seqs} sequences held (the scheduler overcommitted)",
                culprits,
            )
        for rid, n in targets.items():
            pool.reserve(rid, n)

    def finish(self) -> list[TokenOut]:
        """Wait until the running step has lasted its latency; its outputs."""
        if self._outs is None:
            raise RuntimeError("finish() without a started step")
        self.wait(self._started + self.last_emulated_s)
        self.last_actual_s = time.perf_counter() - self._started
        outs, self._outs = self._outs, None
        return outs

    def wait(self, deadline: float) -> None:
        """:func:`wait_until`, counting its CPU time."""
        cpu = time.process_time()
        wait_until(deadline)
        self.last_wait_cpu_s = time.process_time() - cpu
        self.wait_cpu_s += self.last_wait_cpu_s


def pool_budget(cfg: ModelConfig) -> KVBudget | None:
    """The block pool ``emulated.kv_tokens`` gives, in the model's ``block_size`` blocks with at most
    ``max_num_seqs`` requests holding KV; None without ``kv_tokens``."""
    if cfg.emulated is None or cfg.emulated.kv_tokens is None:
        return None
    return KVBudget.from_tokens(cfg.emulated.kv_tokens, cfg.block_size, cfg.max_num_seqs)
