"""A subserver's KV accounting: the engine's block budget, the config's spill policy, and the step costs and
routing statistics the ``cost`` policy prices spills with.

The step costs come from the latency model the run already has for the model: the emulated engine's own, or for
vLLM this machine's calibration profile (``calibration/profiles/<hardware-tag>/<model>.json``, or under
``batching.auto.calibration_dir``), if measured on this CPU or GPU; without one, the policy's relative defaults
(:class:`trcore.StepCost`)."""

from __future__ import annotations

import logging
from typing import Any

from trcore import KVMemory, StepCost, spill_policy
from trcore.errors import ConfigError
from trcore.memory import KVBudget
from trserve.engine.emulated import EmulatedLatency
from trserve.engine.types import Engine
from trserve.hardware import profile_path, read_machine_profile
from trserve.runtime.runspec import RunSpec
from trsim.kv import routing_matrix, step_cost
from trsim.profile import latency_from_profile

log = logging.getLogger(__name__)


def build_memory(spec: RunSpec, model: int, engine: Engine) -> KVMemory | None:
    """The core's KV accounting for ``engine`` under the config's ``memory.policy`` (None when the policy is
    ``off`` or the engine has no block budget, as the hash stand-in)."""
    return memory_for(spec, model, kv_budget_of(engine))


def kv_budget_of(engine: Engine) -> KVBudget | None:
    """The engine's KV cache as the core accounts it, or None when its memory is free (no pool, or the hash
    stand-in, which has no ``kv_budget``)."""
    budget_of = getattr(engine, "kv_budget", None)
    return budget_of() if budget_of is not None else None


def memory_for(spec: RunSpec, model: int, budget: KVBudget | None) -> KVMemory | None:
    """The core's KV accounting for model ``model``'s cache ``budget`` (a worker's engine, or one the lockstep
    driver asked its engine worker for); None when the policy is ``off`` or there is no budget."""
    policy = spec.config.memory.policy
    if policy == "off" or budget is None:
        return None
    cost = step_cost_of(spec, model)
    log.info("model %d: KV %s, policy %s, step cost %s", model, budget, policy, cost)
    readmit = spec.config.backend == "vllm" and spec.config.handoff == "readmit"  # vLLM frees after each token
    return KVMemory(budget, spill_policy(policy, cost, routing_matrix(spec.config.router)), frees_after_step=readmit)


def step_cost_of(spec: RunSpec, model: int) -> StepCost:
    """The linear step model the ``cost`` policy uses for ``model`` (see the module docstring)."""
    emulated = spec.config.models[model].emulated
    if spec.config.backend == "emulated" and emulated is not None:
        return step_cost(EmulatedLatency.from_config(emulated).model)
    profile = _machine_profile(spec, model)
    return StepCost() if profile is None else step_cost(latency_from_profile(profile))


def _machine_profile(spec: RunSpec, model: int) -> Any:
    """This machine's profile of ``model``, or None (logged) when there is none or it is another machine's."""
    try:
        path = profile_path(spec.config, model)
    except ConfigError:
        return None
    try:
        return read_machine_profile(path) if path.is_file() else None
    except (OSError, ValueError, ConfigError) as exc:
        log.warning("model %d: spill costs without profile %s: %s", model, path, str(exc).splitlines()[0])
        return None
