"""A smooth day of traffic for a scenario (``diurnal:``): concurrency and routing that follow a cosine over a
period, cut into equal phases (``trsim.phases``) so the simulator, the adaptive controller and the oracle see
traffic that drifts instead of jumping.

At time t the day's weight is ``w(t) = (1 - cos(2 pi (t / period_s - shift))) / 2``: 0 at the start of the period
(quiet, ``low``), 1 half a period later (busy, ``high``). The concurrency is ``low + w (high - low)``, rounded; the
routing is the mixture ``(1 - w) P_low + w P_high`` (each row still sums to 1; C likewise), with its own
``shift`` so reasoning-heavy hours need not be the busiest. Each of the ``steps`` phases of a period holds the
values at its middle::

    diurnal:
      period_s: 240
      steps: 12
      periods: 1
      concurrency: {low: 8, high: 64}
      router: {P_low: [[0.9, 0.1], [1, 0]], P_high: [[0.5, 0.5], [1, 0]], shift: 0.25}
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from trcore import ConfigError
from trcore.routers import validate_keep_matrix, validate_matrix
from trsim.clock import MAX_SPAN_S
from trsim.scenario_phases import PHASED_ROUTERS, PhaseRouterSpec, PhaseSpec
from trsim.scenario_types import Strict

Matrix = list[list[float]]


class DiurnalConcurrency(Strict):
    low: int = Field(ge=1)
    high: int = Field(ge=1)


class DiurnalRouter(Strict):
    """P (and optionally C) at the quiet and at the busy end of the day; ``shift``: fraction of a period by which
    the routing's cosine lags the concurrency's."""

    P_low: Matrix
    P_high: Matrix
    C_low: Matrix | None = None
    C_high: Matrix | None = None
    shift: float = Field(default=0.0, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _same_shapes(self) -> DiurnalRouter:
        if _shape(self.P_low) != _shape(self.P_high):
            raise ValueError("P_low and P_high must have the same shape")
        if (self.C_low is None) != (self.C_high is None):
            raise ValueError("give both C_low and C_high, or neither")
        if self.C_low is not None and self.C_high is not None and _shape(self.C_low) != _shape(self.C_high):
            raise ValueError("C_low and C_high must have the same shape")
        return self


class DiurnalSpec(Strict):
    """One or more periods of a cosine day, each cut into ``steps`` phases (see the module docstring)."""

    period_s: float = Field(gt=0, le=MAX_SPAN_S)
    steps: int = Field(default=12, ge=2, le=1000)
    periods: int = Field(default=1, ge=1, le=100)
    concurrency: DiurnalConcurrency | None = None
    router: DiurnalRouter | None = None

    @model_validator(mode="after")
    def _something_varies(self) -> DiurnalSpec:
        if self.concurrency is None and self.router is None:
            raise ValueError("give concurrency, router or both: nothing else varies over the day")
        return self


def day_weight(t_s: float, period_s: float, shift: float = 0.0) -> float:
    """``w(t)`` of the module docstring: 0 at the quiet start of a period, 1 half a period later."""
    return (1.0 - math.cos(2.0 * math.pi * (t_s / period_s - shift))) / 2.0


def diurnal_phases(spec: DiurnalSpec) -> list[PhaseSpec]:
    """The equal phases of ``spec``, each with the values at its middle."""
    dt = spec.period_s / spec.steps
    out = []
    for k in range(spec.steps * spec.periods):
        mid = (k + 0.5) * dt
        fields: dict[str, object] = {"duration_s": dt}
        if spec.concurrency is not None:
            lo, hi = spec.concurrency.low, spec.concurrency.high
            fields["concurrency"] = max(1, round(lo + day_weight(mid, spec.period_s) * (hi - lo)))
        if spec.router is not None:
            r = spec.router
            w = day_weight(mid, spec.period_s, r.shift)
            C = _mix(r.C_low, r.C_high, w) if r.C_low is not None and r.C_high is not None else None
            fields["router"] = PhaseRouterSpec(P=_mix(r.P_low, r.P_high, w), C=C)
        out.append(PhaseSpec.model_validate(fields))
    return out


def check_day(spec: DiurnalSpec, num_models: int, program: str) -> None:
    """The day's routing ends, named as written (the phases mix them, so they are valid where the ends are): a
    bad end is refused as ``diurnal.router.P_high``, not as some phase the file does not have."""
    r = spec.router
    if r is None:
        return
    if program not in PHASED_ROUTERS:
        raise ConfigError("diurnal.router", f"mixes P and C of {', '.join(PHASED_ROUTERS)} routers, not {program!r}")
    for name in ("P_low", "P_high"):
        validate_matrix(f"diurnal.router.{name}", getattr(r, name), num_models, stochastic=True)
    for name in ("C_low", "C_high"):
        if getattr(r, name) is not None:
            validate_keep_matrix(getattr(r, name), num_models, f"diurnal.router.{name}")


def _mix(low: Matrix, high: Matrix, w: float) -> Matrix:
    return [[(1 - w) * a + w * b for a, b in zip(ra, rb, strict=True)] for ra, rb in zip(low, high, strict=True)]


def _shape(m: Matrix) -> list[int]:
    return [len(row) for row in m]
