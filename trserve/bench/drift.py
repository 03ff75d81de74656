"""The bench's drift probe: before any bench server starts, the engines of every profiled placement the plan
predicts from are timed against their profiles (``trserve.crossval.drift``), and the outcome is recorded in the
bench JSON and applied to the predictions.

Two placements: the routed pair (one core each, ``<tag>``: tokenrouter*, per-token), probed on one server of
the pair; and every core for one engine (``<tag>-allcores``: lockstep, llm-only), probed one model at a time as
it was calibrated (``configs/allcores-*.yaml``). ``--drift scale`` multiplies each model's profile latencies by
its ratio (the factor is recorded), ``stop`` exits before the bench when a ratio is beyond the tolerance,
``report`` records only, ``skip`` probes nothing. Emulated engines step exactly as configured: no probe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trserve.bench.predict import profile_model
from trserve.bench.systems import EXTERNAL
from trserve.config import ServeConfig
from trserve.crossval.drift import measure_drift, probe_workload
from trserve.crossval.predict import Calibration
from trserve.hardware import hardware_tag
from trserve.server.drift import DriftMeasurement, assess

#: The outcome of a bench that ran no probe (e.g. a plan built in a test).
NOT_PROBED = "not probed"
#: Systems whose engines run on all cores each (predicted from ``<tag>-allcores`` profiles).
ALL_CORES_SYSTEMS = ("lockstep", "llm-only")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchDrift:
    """The probe's outcome: per placement tag, the probed models and the drift report (``ratios``, ``action``,
    ``factors``, ...) or only an ``action`` saying why nothing was probed; ``note`` when no probe was needed."""

    mode: str
    tolerance: float
    placements: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = ""

    def factor(self, tag: str, name: str) -> float:
        """The factor applied to ``name``'s profile of placement ``tag`` (1.0 unless scaled)."""
        entry = self.placements.get(tag, {})
        if name not in entry.get("models", ()) or "factors" not in entry:
            return 1.0
        return float(entry["factors"][entry["models"].index(name)])

    def factors(self, tag: str, names: Sequence[str]) -> list[float]:
        return [self.factor(tag, n) for n in names]

    def source_note(self, tag: str, names: Sequence[str]) -> str:
        """What a prediction's latency source adds: the factors when the profiles were scaled, else ""."""
        factors = self.factors(tag, names)
        return "" if factors == [1.0] * len(names) else ", x drift " + "/".join(f"{f:.2f}" for f in factors)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "tolerance": self.tolerance, "placements": self.placements}
        return out | ({"action": self.note} if self.note else {})

    def line(self) -> str:
        """One line for the bench's headers."""
        head = f"Drift probe (--drift {self.mode}, tolerance {self.tolerance:.0%})"
        if self.note:
            return f"{head}: {self.note}."
        parts = []
        for tag, entry in self.placements.items():
            ratios = ", ".join(f"{n} {r:.2f}x" for n, r in zip(entry["models"], entry.get("ratios", ()), strict=False))
            parts.append(f"{tag}: {ratios + ' -> ' if ratios else ''}{entry['action']}")
        return f"{head}: " + "; ".join(parts) + "."


def placements_of(base: Mapping[str, Any], systems: Sequence[str]) -> dict[str, list[str]]:
    """The profiled placements ``systems`` are predicted from, with the models of each."""
    names = [m["name"] for m in base["models"]]
    out: dict[str, list[str]] = {}
    systems = [s for s in systems if s not in EXTERNAL]  # vLLM's own server is measured, never predicted
    if any(s not in ALL_CORES_SYSTEMS for s in systems):
        out[hardware_tag()] = names
    if "lockstep" in systems:
        out[f"{hardware_tag()}-allcores"] = names
    elif "llm-only" in systems:
        out[f"{hardware_tag()}-allcores"] = names[-1:]
    return out


def probe_configs(base: Mapping[str, Any], tag: str, names: Sequence[str]) -> list[ServeConfig]:
    """The servers the probe starts for placement ``tag``: the pair as the bench runs it, or each model alone on
    every core (as ``configs/allcores-*.yaml`` calibrated it)."""
    if not tag.endswith("-allcores"):
        return [ServeConfig.model_validate({**base, "mode": "routed"})]
    by_name = {m["name"]: m for m in base["models"]}
    router = {"program": "markov", "params": {"P": [[1.0]], "seed": 0}}
    batching = {**base["batching"], "thresholds": None, "tables": None}
    return [
        ServeConfig.model_validate({**base, "mode": "routed", "models": [by_name[n]], "router": router,
                                    "entry_model": 0, "batching": batching})
        for n in names
    ]  # fmt: skip


def probe_bench(
    base: Mapping[str, Any],
    systems: Sequence[str],
    mode: str,
    tolerance: float,
    progress: Progress = lambda _msg: None,
) -> BenchDrift:
    """Probe every placement ``systems`` predict from (raises for ``stop`` beyond the tolerance)."""
    if base.get("backend") == "emulated":
        return BenchDrift(mode, tolerance, note="not needed (emulated: the engines step exactly as configured)")
    placements: dict[str, dict[str, Any]] = {}
    for tag, names in placements_of(base, systems).items():
        models = [profile_model(n, tag) for n in names]
        if mode == "skip":
            placements[tag] = {"models": names, "action": "not probed (--drift skip)"}
            continue
        if any(m is None for m in models):
            placements[tag] = {"models": names, "action": "not probed: no profile of this placement"}
            continue
        progress(f"drift probe: {tag} ({', '.join(names)})")
        parts = []
        for cfg in probe_configs(base, tag, names):
            mine = [models[names.index(m.name)] for m in cfg.models]
            calibration = Calibration(tuple(f"{tag}/{m.name}" for m in cfg.models), tuple(mine))
            parts.append(measure_drift(cfg, probe_workload(cfg), calibration))
        report = assess(DriftMeasurement.concat(parts), mode, tolerance, names)
        placements[tag] = {"models": names, **report.to_dict()}
        progress(f"drift probe: {tag}: {report.summary(names)}")
    return BenchDrift(mode, tolerance, placements)
