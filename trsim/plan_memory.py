"""Where KV memory, not compute, bounds a placement (``tokenrouter plan``; docs/planning.md).

Every request stays resident on every model it visits, so a pipeline holds at most ``capacity / footprint``
requests, the footprint being a request's mean KV over its life: prompt + output / 2 of the workload's lengths
(``trcore.throughput.memory``). The planner skips closed-loop concurrencies beyond that bound, caps the open
loop's batches at it, and reports the bound itself: the concurrency, the model that sets it, the throughput there
(the planner's own evaluator, endless requests holding the footprint) and, for the top placements, the
simulator's throughput at that concurrency with the workload's lengths and exactly that KV pool.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from trcore import KVBudget
from trcore.throughput import KVDemand, MemoryVerdict, memory_check
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.kv import DEFAULT_BLOCK_SIZE, KVSimConfig
from trsim.placement import Placement, kv_capacities, latency_models
from trsim.roofline import RooflineModel
from trsim.workload import WorkloadConfig, preset

#: A ``trsim.plan.PlanConfig`` (not imported: trsim.plan imports this module).
PlanConfig = Any
#: The open loop batches at most this many requests per model (the planner's former cap).
MAX_BATCH = 256
#: Spill policies the memory bound is simulated under (the default, and the one that never spills).
CONFIRM_POLICIES = ("cost", "admission-limit")
Evaluator = Callable[[PlanConfig, list[RooflineModel], int, tuple[int, ...]], tuple[float, str]]


def fits_closed_loop(cfg: PlanConfig, caps: Sequence[int], n: int) -> bool:
    """Whether ``n`` endless requests of ``context_tokens`` each fit resident on every model they visit."""
    return memory_check(cfg.P, KVDemand(tuple(caps), cfg.context_tokens), n).is_feasible


def workload_verdict(cfg: PlanConfig, caps: Sequence[int], lengths: tuple[float, float]) -> MemoryVerdict:
    """What one request of the workload's mean lengths needs, and how many fit."""
    return memory_check(cfg.P, KVDemand(tuple(caps), *lengths), 1)


def batch_cap(cfg: PlanConfig, caps: Sequence[int], lengths: tuple[float, float]) -> int:
    """Requests an open-loop pipeline holds at once: the memory bound at the workload's lengths (1..256)."""
    most = workload_verdict(cfg, caps, lengths).max_concurrency
    return max(min(most if most is not None else MAX_BATCH, MAX_BATCH), 1)


def memory_bound(
    cfg: PlanConfig,
    replicas: int,
    models: list[RooflineModel],
    caps: Sequence[int],
    lengths: tuple[float, float],
    evaluate: Evaluator,
) -> dict[str, Any] | None:
    """The most requests the whole system holds (``replicas`` pipelines), the model that bounds them, and the
    throughput there with thresholds of 1; ``binds``: a searched concurrency lies beyond it. None: nothing fits."""
    verdict = workload_verdict(cfg, caps, lengths)
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
    models = latency_models(p, cfg.hardware, cfg.models, cfg.dtype)
    base = preset(cfg.workload) if isinstance(cfg.workload, str) else cfg.workload
    n, output = row["memory_bound"]["concurrency"] // p.replicas, mean_lengths(base, cfg.seed)[1]
    lifetime = max(int(n * output), cfg.sim_tokens)
    config = markov_config(
        cfg.P, cfg.C, models, [1] * len(models), n, replace(base, num_sessions=None), seed=cfg.seed + 1
    )
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
