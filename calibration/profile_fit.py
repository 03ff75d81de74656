"""Fitting trsim latency models to profile samples on a machine that may lack scipy (used by gpu_profile.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: trsim latency models fitted to the samples; the lowest-MAPE one becomes the profile's ``fit``.
FIT_MODELS = ("linear", "quadratic")


def fit_all(samples: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Fit every FIT_MODELS model (those the samples determine), best MAPE first; also says which fitter ran."""
    try:
        from trsim.fit import LatencySample, fit_latency_model
    except ImportError:  # no scipy (or no simpy, which the trsim package imports) on this machine
        fitter = "numpy fallback (trsim.fit needs scipy and simpy)"
        fits = [numpy_fit(name, samples) for name in FIT_MODELS]
    else:
        typed = [LatencySample(**s) for s in samples]
        fits, fitter = [_trsim_fit(fit_latency_model, name, typed) for name in FIT_MODELS], "trsim.fit"
    return sorted((f for f in fits if f is not None), key=lambda f: f["mape"]), fitter


def _trsim_fit(fit_latency_model: Callable[..., Any], name: str, samples: list[Any]) -> dict[str, Any] | None:
    from trcore import ConfigError

    try:
        result = fit_latency_model(name, samples)
    except ConfigError as exc:  # too few distinct cells for this model's terms
        print(f"fit {name}: {exc}", file=sys.stderr)
        return None
    return {"model": name, "coefficients": result.coefficients, "mape": result.mape}


def numpy_fit(name: str, samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Least squares on relative error with non-negative coefficients (as ``trsim.fit``): terms that come
    out negative are dropped one at a time and the rest refitted."""
    latency_model_class = _latency_module().latency_model_class
    features = latency_model_class(name).features  # type: ignore[attr-defined]
    y = np.array([s["latency_s"] for s in samples])
    x = np.array([features(s["batch_size"], s["context_tokens"], s["extend_tokens"]) for s in samples]) / y[:, None]
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    scale = np.abs(x).max(axis=0)
    active, coef = list(range(x.shape[1])), np.zeros(x.shape[1])
    while active:
        solution = np.linalg.lstsq(x[:, active] / scale[active], np.ones_like(y), rcond=None)[0] / scale[active]
        if solution.min() >= 0:
            coef[active] = solution
            break
        active.pop(int(np.argmin(solution)))
    if not coef.any():
        return None
    names = latency_model_class(name).coefficient_names
    mape = float(np.mean(np.abs(x @ coef - 1.0)))
    return {"model": name, "coefficients": dict(zip(names, map(float, coef), strict=True)), "mape": mape}


def _latency_module() -> Any:
    """``trsim.latency``; loaded from its file when the ``trsim`` package cannot be imported (its
    ``__init__`` needs simpy and pydantic, which a GPU machine may lack; the module itself needs only trcore)."""
    try:
        import trsim.latency as module
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "trsim" / "latency.py"
        spec = importlib.util.spec_from_file_location("_trsim_latency", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module
