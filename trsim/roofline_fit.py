"""Fitting the roofline's efficiencies and overheads to measured step latencies (calibration profiles).

One parameter set is fitted to one or more (model, samples) cases at once: the profiles of several models on one
machine share its efficiencies and overheads, and their different layer counts separate the per-layer from the
per-step cost. The fit minimises relative errors (scipy's bounded least squares), as profile fits report MAPE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from trcore import ConfigError
from trsim.fit import LatencySample, mape
from trsim.profile import LatencyProfile
from trsim.roofline import PARAM_NAMES, RooflineModel, RooflineParams

#: Fitted by default: everything but the link terms, which single-device profiles cannot see.
DEFAULT_FIT = (
    "flops_efficiency",
    "bandwidth_efficiency",
    "attention_efficiency",
    "step_overhead_s",
    "layer_overhead_s",
    "request_overhead_s",
)
_UPPER = {n: 1.0 for n in PARAM_NAMES if n.endswith("efficiency")}
_MAX_OVERHEAD_S = 10.0


@dataclass(frozen=True)
class RooflineFit:
    """Fitted parameters, and the MAPE of the fitted model on each case's samples (in the order given)."""

    params: RooflineParams
    fitted: tuple[str, ...]
    mapes: tuple[float, ...]


def fit_roofline(
    cases: Sequence[tuple[RooflineModel, Sequence[LatencySample]]],
    fit: Sequence[str] = DEFAULT_FIT,
    start: RooflineParams | None = None,
) -> RooflineFit:
    """Fit the parameters named in ``fit`` (the rest stay as in ``start``, default :class:`RooflineParams`)."""
    from scipy.optimize import least_squares

    unknown = sorted(set(fit) - set(PARAM_NAMES))
    if unknown:
        raise ConfigError("roofline.fit", f"unknown parameters {unknown}; valid: {', '.join(PARAM_NAMES)}")
    if not fit or not any(samples for _, samples in cases):
        raise ConfigError("roofline.fit", "needs parameters to fit and at least one sample")
    base = start or RooflineParams()
    names = tuple(fit)
    lower = [1e-3 if n in _UPPER else 0.0 for n in names]
    upper = [_UPPER.get(n, _MAX_OVERHEAD_S) for n in names]
    x0 = [min(max(getattr(base, n), lo), hi) for n, lo, hi in zip(names, lower, upper, strict=True)]

    def params_of(x: Sequence[float]) -> RooflineParams:
        return RooflineParams(**{**asdict(base), **dict(zip(names, map(float, x), strict=True))})

    def residuals(x: Sequence[float]) -> list[float]:
        params = params_of(x)
        out: list[float] = []
        for model, samples in cases:
            tuned = model.with_params(params)
            out += [tuned.predict(s.batch_size, s.context_tokens, s.extend_tokens) / s.latency_s - 1 for s in samples]
        return out

    solution = least_squares(residuals, x0, bounds=(lower, upper), x_scale="jac")
    params = params_of(solution.x)
    mapes = tuple(mape(model.with_params(params), list(samples)) for model, samples in cases)
    return RooflineFit(params, names, mapes)


def fit_roofline_to_profiles(
    profiles: Sequence[LatencyProfile], models: Sequence[RooflineModel], fit: Sequence[str] = DEFAULT_FIT
) -> RooflineFit:
    """Fit to calibration profiles (``tokenrouter calibrate`` or ``calibration/gpu_profile.py`` output), each
    paired with the roofline model of the shape, device and tp degree it was measured on."""
    if len(profiles) != len(models):
        raise ConfigError("roofline.fit", "needs one roofline model per profile")
    return fit_roofline([(m, p.sample_list()) for p, m in zip(profiles, models, strict=True)], fit)
