"""Measured inputs for the planner, in place of what it otherwise assumes.

* **Latency profiles** (``tokenrouter calibrate`` on the target GPUs): where a placement runs a model at the
  tensor parallelism its profile was measured at, alone on its GPUs, the profile's step latency replaces the
  roofline's (memory, weights and KV capacity stay the roofline's: a profile measures time, not bytes).
  Co-located placements keep the roofline: a profile measured alone does not see the other model's contention.
* **Stack costs** (crossval's ``stack.json``): the serving stack's own time per step, per request, per hand-off
  and per delivery, added to the planner's simulator runs (``trsim.config.SimConfig`` fields).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trcore.errors import ConfigError
from trsim.config import SimConfig
from trsim.latency import LatencyModel
from trsim.placement import Placement, latency_models

#: The :class:`SimConfig` fields stack costs may set in the planner's runs.
STACK_FIELDS = ("host_overhead_s", "host_overhead_per_request_s", "transfer_delay_s", "delivery_delay_s")


@dataclass(frozen=True)
class MeasuredProfile:
    """One model's measured step latency at one tensor parallelism; ``source`` says where it came from."""

    model: str
    tp: int
    latency: LatencyModel
    source: str


class ProfiledRoofline(LatencyModel):
    """A roofline whose step latency is a measured profile's; everything else (memory, weights) is the
    roofline's."""

    def __init__(self, roofline: Any, measured: LatencyModel) -> None:
        self.roofline = roofline
        self.measured = measured
        self.prices_extend = measured.prices_extend  # type: ignore[misc]

    def coefficients(self) -> dict[str, Any]:
        return self.measured.coefficients()

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.measured.predict(batch_size, context_tokens, extend_tokens)

    def __getattr__(self, name: str) -> Any:
        if name in ("roofline", "measured"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.roofline, name)


def plan_models(
    placement: Placement, hardware: str, shapes: Mapping[str, str], dtype: str, profiles: Sequence[MeasuredProfile]
) -> list[Any]:
    """The planner's latency model per model of ``placement``: the roofline, or its measured profile where one
    matches the model's name and tensor parallelism and the placement is not co-located."""
    models = latency_models(placement, hardware, shapes, dtype)
    if not profiles or (placement.colocated and len(models) > 1):
        return models
    by_key = {(p.model, p.tp): p.latency for p in profiles}
    return [
        ProfiledRoofline(m, by_key[(name, tp)]) if (name, tp) in by_key else m
        for m, name, tp in zip(models, shapes, placement.tp, strict=True)
    ]


def with_stack(config: SimConfig, stack: Mapping[str, Any]) -> SimConfig:
    """``config`` with the stack costs ``stack`` (:data:`STACK_FIELDS`, per model where a tuple); none: as is."""
    if not stack:
        return config
    unknown = set(stack) - set(STACK_FIELDS)
    if unknown:
        raise ConfigError("stack", f"unknown cost fields {sorted(unknown)}; valid: {', '.join(STACK_FIELDS)}")
    return replace(config, **stack)


def last_model_stack(stack: Mapping[str, Any]) -> dict[str, Any]:
    """The stack costs of the last model alone (per-model tuples cut to their last entry)."""
    return {k: (v[-1:] if isinstance(v, tuple) else v) for k, v in stack.items()}


def check_profiles(profiles: Sequence[MeasuredProfile], shapes: Mapping[str, str]) -> None:
    """Refuse a profile for a model the plan does not have, or two for the same model and tensor parallelism."""
    seen: set[tuple[str, int]] = set()
    for p in profiles:
        if p.model not in shapes:
            raise ConfigError("--profile", f"no model {p.model!r} in the plan; its models: {', '.join(shapes)}")
        if p.tp < 1:
            raise ConfigError("--profile", f"{p.model}: tensor parallelism must be >= 1, got {p.tp}")
        if (p.model, p.tp) in seen:
            raise ConfigError("--profile", f"two profiles for {p.model} at tp {p.tp}")
        seen.add((p.model, p.tp))
