"""What to do when the engines step at another speed than their calibration profiles say (profiles drift between
machines of one kind, and with load on a shared machine): the pure half of the drift probe.

A probe (``trserve.crossval.drift`` runs one on real engines; the CLI injects it into ``thresholds: auto``)
measures, per model, the median ratio of observed to profile step time (:class:`DriftMeasurement`). Then
:func:`assess` applies the mode: ``scale`` multiplies the profile's latencies by the ratio (a recorded factor),
``stop`` refuses to predict beyond the tolerance with a message naming ``tokenrouter calibrate``, ``report``
records the ratio and changes nothing; ``skip`` runs no probe at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, get_args

from trcore.errors import ConfigError
from trserve.config import DriftMode, ServeConfig

DRIFT_MODES: tuple[str, ...] = get_args(DriftMode)
#: Beyond this relative difference from the profile, ``stop`` stops.
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class DriftMeasurement:
    """Per model: median observed / profile step time over the probe's decode steps, the same per batch size,
    and the number of steps it rests on (a model with no such step: ratio 1.0, 0 steps); the context (tokens per
    request) the profile was read at."""

    ratios: list[float]
    per_batch: list[dict[int, float]]
    num_steps: list[int]
    context_tokens: int = 0
    #: Where the engines were timed: ``alone`` (one at a time) or ``serving`` (all stepping, the front end busy).
    placement: str = "alone"

    @staticmethod
    def concat(parts: Sequence[DriftMeasurement]) -> DriftMeasurement:
        """One measurement of the models of ``parts`` in order (e.g. probed one server at a time)."""
        return DriftMeasurement(
            [r for p in parts for r in p.ratios],
            [d for p in parts for d in p.per_batch],
            [n for p in parts for n in p.num_steps],
            max((p.context_tokens for p in parts), default=0),
            parts[0].placement if parts else "alone",
        )


#: Measures the engines of a config against its models' profile latency models (``trsim.latency`` duck types).
DriftProbe = Callable[[ServeConfig, Sequence[Any]], DriftMeasurement]


@dataclass(frozen=True)
class DriftReport:
    """A measurement and what was done with it: the mode, the tolerance, the action and the factors applied to
    the profiles (1.0 each unless ``action`` is ``scaled``)."""

    ratios: list[float]
    per_batch: list[dict[int, float]]
    num_steps: list[int]
    mode: str
    tolerance: float
    action: str
    factors: list[float] = field(default_factory=list)
    context_tokens: int = 0
    placement: str = "alone"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_batch"] = [{str(b): r for b, r in d.items()} for d in self.per_batch]
        return out

    def summary(self, names: Sequence[str]) -> str:
        """One line: each model's ratio and what was done, e.g. ``small 0.83x, large 0.85x their profiles:
        scaled``."""
        ratios = ", ".join(f"{n} {r:.2f}x" for n, r in zip(names, self.ratios, strict=True))
        return f"{ratios} their profiles: {self.action}"


def decide(
    ratios: Sequence[float], mode: str, tolerance: float, names: Sequence[str], remedy: str = "pass --drift scale"
) -> tuple[str, list[float]]:
    """What to do with the probe's ratios: ``(action, factors)``; raises for ``stop`` beyond the tolerance (the
    message names ``tokenrouter calibrate`` and ``remedy``)."""
    if mode not in DRIFT_MODES:
        raise ConfigError("drift", f"unknown mode {mode!r}; valid: {', '.join(DRIFT_MODES)}")
    off = [(n, r) for n, r in zip(names, ratios, strict=True) if abs(r - 1.0) > tolerance]
    if mode == "scale":
        return "scaled", list(ratios)
    if mode == "stop" and off:
        drifted = ", ".join(f"{n} steps at {r:.2f}x its profile" for n, r in off)
        raise ConfigError(
            "drift",
            f"{drifted} (drift probe, tolerance {tolerance:.0%}); re-run `tokenrouter calibrate` on this machine "
            f"or {remedy}",
        )
    return ("within tolerance" if not off else "reported only"), [1.0] * len(ratios)


def assess(
    measured: DriftMeasurement, mode: str, tolerance: float, names: Sequence[str], remedy: str = "pass --drift scale"
) -> DriftReport:
    """``measured`` with the decision of :func:`decide` (raises for ``stop`` beyond the tolerance)."""
    action, factors = decide(measured.ratios, mode, tolerance, names, remedy)
    return DriftReport(
        measured.ratios, measured.per_batch, measured.num_steps, mode, tolerance, action, factors,
        measured.context_tokens, measured.placement,
    )  # fmt: skip
