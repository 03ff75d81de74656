"""Calibration profiles: measured step latencies of one LLM on one machine, with fits (docs/profile-schema.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trcore import ConfigError
from trsim.fit import LatencyFit, LatencySample, fit_latency_model, mape
from trsim.latency import LatencyModel, make_latency_model

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MachineInfo(BaseModel):
    """Where the samples were measured. ``description`` is required; further keys are kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)
    description: str = Field(min_length=1)
    device: str | None = None
    accelerator: str | None = None
    num_threads: int | None = Field(default=None, ge=1)


class SampleRecord(_Strict):
    batch_size: int = Field(ge=1)
    context_tokens: int = Field(ge=0)
    extend_tokens: int = Field(ge=0)
    latency_s: float = Field(gt=0)


class FitRecord(_Strict):
    model: str
    coefficients: dict[str, Any]
    mape: float | None = Field(default=None, ge=0)


class LatencyProfile(_Strict):
    """A calibration profile. ``fit`` is the preferred model; ``other_fits`` are alternatives kept for study."""

    schema_version: Literal[1] = SCHEMA_VERSION
    llm: str = Field(min_length=1, description="the measured model, e.g. SmolLM2-135M-Instruct")
    backend: str | None = None
    created: str | None = None
    machine: MachineInfo
    samples: list[SampleRecord] = Field(default_factory=list)
    fit: FitRecord | None = None
    other_fits: list[FitRecord] = Field(default_factory=list)
    #: How the samples were taken (method, grid, spread per cell, hand-off cost, ...): free-form, kept as given.
    calibration: dict[str, Any] | None = None

    def sample_list(self) -> list[LatencySample]:
        return [LatencySample(**s.model_dump()) for s in self.samples]


def load_profile(path: str | Path) -> LatencyProfile:
    """Read and validate a profile JSON file (pydantic errors name the field)."""
    with open(path) as fh:
        data = json.load(fh)
    return LatencyProfile.model_validate(data)


def save_profile(profile: LatencyProfile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile.model_dump(exclude_none=True), indent=2) + "\n")


def latency_from_profile(profile: LatencyProfile, model: str | None = None) -> LatencyModel:
    """The profile's latency model: its ``fit`` (or the fit named ``model`` among its fits), else a fresh fit
    of ``model`` to its samples."""
    fits = [f for f in [profile.fit, *profile.other_fits] if f is not None]
    for record in fits:
        if model is None or record.model == model:
            return make_latency_model(record.model, record.coefficients)
    if not profile.samples:
        raise ConfigError("profile.samples", f"no fit named {model or '(any)'} and no samples to fit one from")
    return fit_latency_model(model or "linear", profile.sample_list()).build()


def make_profile(
    llm: str,
    machine: dict[str, Any],
    samples: list[LatencySample],
    fit_models: tuple[str, ...] = ("linear", "quadratic"),
    **meta: Any,
) -> LatencyProfile:
    """Build a profile from samples: fits every model in ``fit_models``; the lowest-MAPE one becomes ``fit``."""
    fits: list[LatencyFit] = sorted(
        (fit_latency_model(name, samples) for name in fit_models), key=lambda f: f.mape or 0.0
    )
    records = [FitRecord(model=f.model, coefficients=f.coefficients, mape=f.mape) for f in fits]
    return LatencyProfile(
        llm=llm,
        machine=MachineInfo(**machine),
        samples=[SampleRecord(**vars(s)) for s in samples],
        fit=records[0] if records else None,
        other_fits=records[1:],
        **meta,
    )


def profile_mape(profile: LatencyProfile, model: LatencyModel) -> float:
    """MAPE of any latency model on a profile's samples."""
    return mape(model, profile.sample_list())
