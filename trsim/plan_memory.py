"""Where KV memory, not compute, bounds a placement (``tokenrouter plan``; docs/planning.md).

Every request stays resident on every model it visits, so a pipeline holds at most about ``capacity / footprint``
requests, the footprint being the mean KV of a request resident at an instant: prompt + E[L^2] / (2 E[L]) of the
workload's lengths (long requests stay longer, so they are over-represented among the residents), with a margin of
:data:`OVERFLOW_Z` standard deviations of the residents' summed KV (``trcore.throughput.memory``). The planner
skips closed-loop concurrencies beyond that bound, caps the open loop's batches at it, and reports the bound
itself: the concurrency, the model that sets it, the throughput there (the planner's own evaluator, endless
requests holding the footprint) and, for the top placements, the simulator's throughput at that concurrency with
the workload's lengths and exactly that KV pool.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trcore import KVBudget
from trcore.throughput import KVDemand, MemoryVerdict, memory_check
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.kv import DEFAULT_BLOCK_SIZE, KVSimConfig
from trsim.placement import Placement, kv_capacities
from trsim.plan_inputs import plan_models, with_stack
from trsim.roofline import RooflineModel
from trsim.workload import WorkloadConfig, preset

#: A ``trsim.plan.PlanConfig`` (not imported: trsim.plan imports this module).
PlanConfig = Any
#: The open loop batches at most this many requests per model (the planner's former cap).
MAX_BATCH = 256
#: Spill policies the memory bound is simulated under (the default, and the one that never spills).
CONFIRM_POLICIES = ("cost", "admission-limit")
Evaluator = Callable[[PlanConfig, list[RooflineModel], int, tuple[int, ...]], tuple[float, str]]


#: The memory bound's margin (standard deviations): N residents' KV stays within the cache 95% of the time.
OVERFLOW_Z = 1.645


@dataclass(frozen=True)
class LengthMoments:
    """A workload's mean prompt and output, E[L^2] / E[L]^2 of its outputs, and the standard deviation of one
    resident request's KV (its position uniform over its output, requests weighted by their output length)."""

    mean_prompt: float
    mean_output: float
    output_spread: float
    footprint_std: float


def length_moments(workload: WorkloadConfig, seed: int = 0, num: int = 20000) -> LengthMoments:
    """:class:`LengthMoments` of ``workload`` from ``num`` sampled requests (a fixed seed)."""
    rng = random.Random(seed)
    pairs = [(float(workload.prompt_tokens.sample(rng)), float(workload.output_tokens.sample(rng))) for _ in range(num)]
    mean_p, mean_l = sum(p for p, _ in pairs) / num, sum(o for _, o in pairs) / num
    mean_l2 = sum(o * o for _, o in pairs) / num
    if mean_l <= 0:
        return LengthMoments(mean_p, 0.0, 1.0, statistics.pstdev(p for p, _ in pairs))
    first = sum(p * o + o * o / 2 for p, o in pairs) / num / mean_l  # E[X] over residents, X = p + u L
    second = sum(p * p * o + p * o * o + o**3 / 3 for p, o in pairs) / num / mean_l  # E[X^2] over residents
    spread = max(1.0, mean_l2 / mean_l**2)  # E[L^2] >= E[L]^2; rounding put equal long outputs just below 1
    return LengthMoments(mean_p, mean_l, spread, math.sqrt(max(0.0, second - first * first)))


def resident_demand(caps: Sequence[int], workload: WorkloadConfig, seed: int = 0) -> KVDemand:
    """The KV the workload's resident requests need, for the memory bound (length-biased, with the margin)."""
    mo = length_moments(workload, seed)
    return KVDemand(tuple(caps), mo.mean_prompt, mo.mean_output, mo.output_spread, mo.footprint_std, OVERFLOW_Z)


def fits_closed_loop(cfg: PlanConfig, caps: Sequence[int], n: int) -> bool:
    """Whether ``n`` endless requests of ``context_tokens`` each fit resident on every model they visit."""
    return memory_check(cfg.P, KVDemand(tuple(caps), cfg.context_tokens), n).is_feasible


def workload_verdict(cfg: PlanConfig, caps: Sequence[int], workload: WorkloadConfig) -> MemoryVerdict:
    """What one resident request of the workload needs, and how many fit (:func:`resident_demand`)."""
    return memory_check(cfg.P, resident_demand(caps, workload, cfg.seed), 1)


def batch_cap(cfg: PlanConfig, caps: Sequence[int], workload: WorkloadConfig) -> int:
    """Requests an open-loop pipeline holds at once: the memory bound of the workload (1..256)."""
    most = workload_verdict(cfg, caps, workload).max_concurrency
    return max(min(most if most is not None else MAX_BATCH, MAX_BATCH), 1)


def memory_bound(
    cfg: PlanConfig,
    replicas: int,
    models: list[RooflineModel],
    caps: Sequence[int],
    workload: WorkloadConfig,
    evaluate: Evaluator,
) -> dict[str, Any] | None:
    """The most requests the whole system holds (``replicas`` pipelines), the model that bounds them, and the
    throughput there with thresholds of 1 (endless requests holding the mean resident footprint); ``binds``: a
    searched concurrency lies beyond it. None: nothing fits."""
    verdict = workload_verdict(cfg, caps, workload)
    n = verdict.max_concurrency
    if not n or verdict.bound_model is None:
        return None
    footprint = verdict.footprint_tokens
    tok_s, how = evaluate(replace(cfg, context_tokens=round(footprint)), models, n, (1,) * len(models))
    return {
        "concurrency": n * replicas,
        "bound_model": list(cfg.models)[verdict.bound_model],
        "footprint_tokens": footprint,
        "kv_capacity_tokens": list(caps),
        "throughput_tok_s": tok_s * replicas,
        "evaluator": how,
        "binds": max(cfg.concurrencies) > n * replicas,
    }


def confirm_memory_bound(cfg: PlanConfig, row: dict[str, Any]) -> dict[str, float]:
    """The simulator's throughput (whole system) at a placement's memory bound under each spill policy of
    :data:`CONFIRM_POLICIES`: one pipeline's share of the requests, closed loop with the preset's lengths, exactly
    the pipeline's KV capacity per model (blocks of 16); two request lifetimes after a warm-up of half of one."""
    p: Placement = row["placement"]
    models = plan_models(p, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
    base = preset(cfg.workload) if isinstance(cfg.workload, str) else cfg.workload
    n, output = row["memory_bound"]["concurrency"] // p.replicas, mean_lengths(base, cfg.seed)[1]
    lifetime = max(int(n * output), cfg.sim_tokens)
    workload = replace(base, num_sessions=None, staggered_start=True)  # a steady mix, not one synchronized wave
    config = with_stack(markov_config(cfg.P, cfg.C, models, [1] * len(models), n, workload, seed=cfg.seed + 1),
                        cfg.stack)  # fmt: skip
    budgets = tuple(KVBudget.from_tokens(c, DEFAULT_BLOCK_SIZE) for c in kv_capacities(p, models))
    out = {}
    for spill in CONFIRM_POLICIES:
        run = replace(config, kv=KVSimConfig(budgets, spill))
        result = simulate(run, tokens=2 * lifetime + lifetime // 2, warmup_tokens=lifetime // 2)
        out[spill] = result.throughput_tok_s * p.replicas
    return out


def mean_lengths(workload: WorkloadConfig, seed: int = 0, num: int = 2000) -> tuple[float, float]:
    """Mean prompt and output lengths of a workload (sampled with a fixed seed)."""
    rng = random.Random(seed)
    prompts = [workload.prompt_tokens.sample(rng) for _ in range(num)]
    outputs = [workload.output_tokens.sample(rng) for _ in range(num)]
    return sum(prompts) / num, sum(outputs) / num
