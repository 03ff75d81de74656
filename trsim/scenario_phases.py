"""The scenario sections of a time-varying run: ``phases:`` (spans that override the router's P and C, the
concurrency and the output lengths) and ``adaptive:`` (the knobs of ``--thresholds adaptive``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from trcore import ConfigError
from trcore.adaptive import AdaptiveConfig
from trsim.adaptive import AdaptiveSimConfig
from trsim.clock import MAX_SPAN_S
from trsim.phases import Phase
from trsim.scenario_types import Length, Positive, Strict, length_dist

#: Routing sources whose ``P`` and ``C`` parameters a phase may override.
PHASED_ROUTERS = ("markov", "bursty")


class PhaseRouterSpec(Strict):
    P: list[list[float]] | None = None
    C: list[list[float]] | None = None


class PhaseSpec(Strict):
    """One span of the run: ``duration_s`` and any of ``router: {P, C}``, ``concurrency``, ``output_tokens``."""

    duration_s: float = Field(gt=0, le=MAX_SPAN_S)
    router: PhaseRouterSpec | None = None
    concurrency: int | None = Field(default=None, ge=1)
    output_tokens: Length | None = None


class AdaptiveSpec(Strict):
    """The controller's knobs (``trcore.adaptive.AdaptiveConfig``) and the simulator's: ``tick_s`` between
    decisions, ``solve_delay_s`` of simulated time a solve takes before its vector applies."""

    window_s: Positive = 10.0
    min_gain: float = Field(default=0.02, ge=0, lt=1)
    min_interval_s: float = Field(default=10.0, ge=0)
    min_steps: int = Field(default=200, ge=1)
    min_fill: float = Field(default=1.0, ge=0, le=1)
    tolerance: float = Field(default=0.02, ge=0)
    latency_tolerance: float = Field(default=0.05, ge=0)
    solve_interval_s: float = Field(default=5.0, ge=0)
    change_window_s: float | None = Field(default=None, ge=0)
    change_sigma: float = Field(default=4.0, gt=0)
    gain_sigma: float = Field(default=2.0, ge=0)
    method: Literal["auto", "sampled", "exact"] = "auto"
    max_candidates: int = Field(default=256, ge=1)
    tick_s: float = Field(default=1.0, gt=0, le=MAX_SPAN_S)
    solve_delay_s: float = Field(default=0.0, ge=0, le=MAX_SPAN_S)
    seed: int = 0


def phases_from_specs(specs: Sequence[PhaseSpec], program: str) -> tuple[Phase, ...]:
    """The run's phases; a router override needs a routing source that reads P and C."""
    phases = []
    for k, spec in enumerate(specs):
        router = spec.router
        if router is not None and program not in PHASED_ROUTERS:
            raise ConfigError(
                f"phases[{k}].router", f"overrides P and C of {', '.join(PHASED_ROUTERS)} routers, not {program!r}"
            )
        phases.append(
            Phase(
                duration_s=spec.duration_s,
                P=_matrix(router.P) if router else None,
                C=_matrix(router.C) if router else None,
                concurrency=spec.concurrency,
                output_tokens=length_dist(spec.output_tokens, f"phases[{k}].output_tokens"),
            )
        )
    return tuple(phases)


def _matrix(rows: list[list[float]] | None) -> tuple[tuple[float, ...], ...] | None:
    return None if rows is None else tuple(tuple(float(x) for x in row) for row in rows)


def adaptive_config(spec: AdaptiveSpec) -> AdaptiveSimConfig:
    knobs = spec.model_dump(exclude={"tick_s", "solve_delay_s"})
    return AdaptiveSimConfig(AdaptiveConfig(**knobs), tick_s=spec.tick_s, solve_delay_s=spec.solve_delay_s)
