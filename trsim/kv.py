"""KV memory in the simulator: each model's budget and the spill policy (:class:`KVSimConfig`), the core's
:class:`~trcore.KVMemory` built for every subserver, and the run's memory metrics (:class:`KVRecorder`).

The accounting is the core's own (``trcore.kvplan``); the simulator only chooses the budgets, prices the cost
policy from what it already knows (the latency model's terms, the Markov router's P) and fails the requests the
core hands back as unservable. A spilled or preempted request's next step feeds its whole sequence, so the
latency model charges the recompute as extend tokens wherever it has an extend term (quadratic, roofline; a
constant or a table recomputes for free).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trcore import ConfigError, KVBudget, KVMemory, StepCost, spill_policy
from trsim.latency import LatencyModel, QuantizedModel, ScaledModel
from trsim.placement import MEMORY_FRACTION
from trsim.roofline import RooflineModel, max_batch_tokens
from trsim.routing import RouterConfig

if TYPE_CHECKING:
    from trsim.profile import LatencyProfile
    from trsim.scenario_types import KVSpec

#: Tokens of extend at which :func:`step_cost` reads a latency model's extend term.
EXTEND_PROBE = 512
#: Block size when neither the caller nor a profile gives one (vLLM's default on GPUs).
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class KVSimConfig:
    """KV caches of a simulated system: ``budgets[m]`` is model ``m``'s (every replica gets its own copy);
    ``spill`` names the core's policy (``cost``, ``lru``, ``admission-limit``)."""

    budgets: tuple[KVBudget, ...]
    spill: str = "cost"

    def __post_init__(self) -> None:
        spill_policy(self.spill, field="spill")  # an unknown name is a ConfigError listing the valid ones
        if not self.budgets:
            raise ConfigError("kv", "needs one budget per model")


BudgetSource = tuple[LatencyModel, "LatencyProfile | None"]


def kv_from_specs(specs: Sequence[KVSpec | None], sources: Sequence[BudgetSource], spill: str) -> KVSimConfig | None:
    """Every model's budget, or None when no model has a KV section (memory free)."""
    if all(k is None for k in specs):
        return None
    budgets = []
    for i, (spec, source) in enumerate(zip(specs, sources, strict=True)):
        if spec is None:
            raise ConfigError(f"models[{i}].kv", "give every model a kv section, or none")
        budgets.append(make_budget(spec.tokens, spec.blocks, spec.block_size, spec.max_seqs, source, f"models[{i}].kv"))
    return KVSimConfig(tuple(budgets), spill)


def make_budget(
    tokens: int | str | None,
    blocks: int | None,
    block_size: int | None,
    max_seqs: int | None,
    source: BudgetSource,
    where: str,
) -> KVBudget:
    """One model's budget from ``tokens`` (a number, or ``auto``: see :func:`auto_capacity`) or ``blocks``;
    ``block_size`` and ``max_seqs`` default to the profile's engine record, else 16 and no limit."""
    if (tokens is None) == (blocks is None):
        raise ConfigError(where, "give exactly one of tokens and blocks")
    engine = _engine_record(source[1])
    size = block_size or int(engine.get("block_size") or DEFAULT_BLOCK_SIZE)
    seqs = max_seqs or engine.get("max_num_seqs")
    if blocks is not None:
        return KVBudget(blocks, size, seqs)
    if tokens == "auto":
        tokens = auto_capacity(*source, where=where)
    if isinstance(tokens, str) or tokens < size:
        raise ConfigError(where, f"tokens must be a number of at least one block ({size}) or 'auto', got {tokens!r}")
    return KVBudget.from_tokens(tokens, size, seqs)


def auto_capacity(latency: LatencyModel, profile: LatencyProfile | None, where: str = "kv") -> int:
    """KV tokens of the engine a profile was measured on (its ``calibration.engine.kv_capacity_tokens``), else
    of a roofline model's device: its memory times vLLM's utilization (0.9) less the weights, over the KV bytes
    per token (``trsim.roofline.max_batch_tokens``)."""
    recorded = _engine_record(profile).get("kv_capacity_tokens")
    if recorded:
        return int(recorded)
    while isinstance(latency, QuantizedModel | ScaledModel):
        latency = latency.inner if isinstance(latency, QuantizedModel) else latency.base
    if isinstance(latency, RooflineModel):
        tokens = max_batch_tokens(latency, MEMORY_FRACTION)
        if tokens == 0:  # the weights alone fill the device: say so, not "got 0"
            weights_gb, memory_gb = latency.weight_bytes() / 1e9, latency.device.memory_bytes / 1e9
            raise ConfigError(
                where,
                f"'auto': {latency!r} holds {weights_gb:.1f} GB of weights per GPU, more than {MEMORY_FRACTION:.0%} "
                f"of its {memory_gb:.0f} GB: no room for a KV cache (raise tp)",
            )
        return tokens
    raise ConfigError(where, "'auto' needs a roofline latency or a profile that records its engine's KV capacity")


def _engine_record(profile: LatencyProfile | None) -> dict[str, Any]:
    if profile is None:
        return {}
    return dict((profile.calibration or {}).get("engine") or {})


def step_cost(latency: LatencyModel) -> StepCost:
    """The cost policy's linear step model read off ``latency`` at no context: the fixed cost of a step, the
    cost of one more request, and the cost per extend token (0 for a model without an extend term)."""
    one, two = latency.predict(1, 0, 0), latency.predict(2, 0, 0)
    per_request = max(0.0, two - one)
    extend = max(0.0, latency.predict(1, 0, EXTEND_PROBE) - one) / EXTEND_PROBE
    return StepCost(base_s=max(one - per_request, 0.0), per_request_s=per_request, extend_s=extend)


def routing_matrix(router: RouterConfig) -> list[list[float]] | None:
    """The per-step move probabilities the router is built from (``P`` of ``markov`` and ``bursty``), else
    None (the cost policy then assumes every session with tokens left returns)."""
    P = router.params.get("P")
    return [list(map(float, row)) for row in P] if P is not None else None


def build_memory(kv: KVSimConfig, model: int, latency: LatencyModel, router: RouterConfig) -> KVMemory:
    """One subserver's :class:`~trcore.KVMemory`: model ``model``'s budget and a fresh policy instance."""
    policy = spill_policy(kv.spill, step_cost(latency), routing_matrix(router))
    return KVMemory(kv.budgets[model], policy)


class KVRecorder:
    """Blocks in use over the run, per subserver: the peak and the time-weighted mean. The driver calls
    :meth:`observe` after every change it makes (launches, completions, releases)."""

    def __init__(self, memories: Sequence[KVMemory]) -> None:
        self.memories = list(memories)
        self.num_failed = 0
        self._peak = [0] * len(memories)
        self._area = [0] * len(memories)  # block-ticks
        self._used = [0] * len(memories)
        self._tick = 0

    def observe(self, tick: int) -> None:
        """Close the interval since the last observation at the blocks then in use; read them anew."""
        dt = tick - self._tick
        self._tick = tick
        for p, memory in enumerate(self.memories):
            used = memory.ledger.num_used
            self._area[p] += self._used[p] * dt
            self._used[p] = used
            if used > self._peak[p]:
                self._peak[p] = used

    def summary(self, end_tick: int, spill: str, labels: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The ``kv`` section of a result: the policy, failed requests and one row per subserver."""
        self.observe(end_tick)
        rows = []
        for p, (memory, label) in enumerate(zip(self.memories, labels, strict=True)):
            budget, stats = memory.ledger.budget, memory.stats
            rows.append(
                {
                    **label,
                    "block_size": budget.block_size,
                    "capacity_blocks": budget.num_blocks,
                    "capacity_tokens": budget.capacity_tokens,
                    "max_seqs": budget.max_seqs,
                    "peak_used_blocks": self._peak[p],
                    "mean_used_blocks": self._area[p] / end_tick if end_tick else 0.0,
                    "num_spilled": stats.num_spilled,
                    "num_preempted": stats.num_preempted,
                    "num_recomputed_tokens": stats.num_recomputed_tokens,
                    "num_admission_waits": stats.num_admission_waits,
                }
            )
        return {"spill": spill, "num_failed": self.num_failed, "models": rows}
