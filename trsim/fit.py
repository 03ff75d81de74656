"""Fitting latency models to measured step samples, and their error (MAPE)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from trcore import ConfigError
from trsim.latency import LatencyModel, LinearInParameters, latency_model_class, make_latency_model


@dataclass(frozen=True)
class LatencySample:
    """One measured step: its batch size, context tokens (sum over the batch), extend tokens (tokens fed
    beyond one per request) and wall latency."""

    batch_size: int
    context_tokens: int
    extend_tokens: int
    latency_s: float


@dataclass(frozen=True)
class LatencyFit:
    """A fitted latency model: registry name, coefficients, and mean absolute percentage error on the samples."""

    model: str
    coefficients: dict[str, Any] = field(default_factory=dict)
    mape: float | None = None

    def build(self) -> LatencyModel:
        return make_latency_model(self.model, self.coefficients)


def mape(model: LatencyModel, samples: Sequence[LatencySample]) -> float:
    """Mean absolute percentage error of ``model`` on ``samples`` (a fraction: 0.05 is 5%)."""
    if not samples:
        raise ConfigError("samples", "needs at least one sample")
    errors = [
        abs(model.predict(s.batch_size, s.context_tokens, s.extend_tokens) - s.latency_s) / s.latency_s for s in samples
    ]
    return float(np.mean(errors))


def fit_latency_model(name: str, samples: Sequence[LatencySample]) -> LatencyFit:
    """Fit model ``name`` to ``samples``.

    ``constant`` takes the mean latency, ``table`` the mean per batch size; linear-in-parameters models
    (``linear``, ``quadratic``) solve a least-squares problem on relative residuals (so small and large
    batches weigh alike, matching MAPE) with non-negative coefficients (latency never falls as work grows).
    """
    cls = latency_model_class(name)
    _check_samples(samples)
    if name == "constant":
        coefficients: dict[str, Any] = {"latency_s": float(np.mean([s.latency_s for s in samples]))}
    elif name == "table":
        coefficients = _fit_table(samples)
    elif issubclass(cls, LinearInParameters):
        coefficients = _fit_linear(cls, samples)
    else:
        raise ConfigError("latency.model", f"model {name!r} cannot be fitted from samples")
    model = make_latency_model(name, coefficients)
    return LatencyFit(name, coefficients, mape(model, samples))


def _check_samples(samples: Sequence[LatencySample]) -> None:
    if not samples:
        raise ConfigError("samples", "needs at least one sample to fit")
    for k, s in enumerate(samples):
        if s.batch_size < 1 or s.context_tokens < 0 or s.extend_tokens < 0 or not s.latency_s > 0:
            raise ConfigError(f"samples[{k}]", f"needs batch_size >= 1, tokens >= 0, latency_s > 0; got {s}")


def _fit_table(samples: Sequence[LatencySample]) -> dict[str, Any]:
    by_size: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_size[s.batch_size].append(s.latency_s)
    sizes = sorted(by_size)
    return {"batch_sizes": sizes, "latency_s": [float(np.mean(by_size[b])) for b in sizes]}


def _fit_linear(cls: type[LinearInParameters], samples: Sequence[LatencySample]) -> dict[str, Any]:
    rows = np.array([cls.features(s.batch_size, s.context_tokens, s.extend_tokens) for s in samples], dtype=float)
    target = np.array([s.latency_s for s in samples], dtype=float)
    if np.linalg.matrix_rank(rows) < rows.shape[1]:
        raise ConfigError(
            "samples",
            f"cannot fit {cls.name!r}: its {rows.shape[1]} terms ({', '.join(cls.coefficient_names)}) are not "
            "all determined by the samples (vary batch size and token counts more)",
        )
    weights = 1.0 / target
    # Scale columns so the solver sees comparable magnitudes (context tokens run into the millions).
    scale = np.abs(rows * weights[:, None]).max(axis=0)
    scale[scale == 0] = 1.0
    result = lsq_linear(rows * weights[:, None] / scale, target * weights, bounds=(0.0, np.inf))
    coefs = result.x / scale
    return {n: float(c) for n, c in zip(cls.coefficient_names, coefs, strict=True)}
