"""Synthetic calibration profiles with exact linear step latencies, for tests that check a pipeline (crossval,
drift probes, ``thresholds: auto``) rather than a fit's accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trserve.hardware import cpu_model, local_gpu_name
from trsim.fit import LatencySample
from trsim.profile import make_profile, save_profile

NAMES = ("small", "large")


def by_hand(k: int, batch: int, context: int, scale: float = 1.0) -> float:
    """Model ``k``'s step latency in these profiles: a_k + b * batch + c * batch * context (exact linear data)."""
    return scale * (0.02 * (k + 1) + 0.002 * batch + 2e-6 * batch * context)


def write_profiles(folder: Path, names: Sequence[str] = NAMES, scale: float = 1.0) -> list[Path]:
    """One profile per name under ``folder`` (created), model ``k`` stepping :func:`by_hand` times ``scale``."""
    folder.mkdir(parents=True, exist_ok=True)
    machine = {"description": "synthetic", "cpu_model": cpu_model(), "accelerator": local_gpu_name()}
    paths = []
    for k, name in enumerate(names):
        samples = [LatencySample(n, n * c, 0, by_hand(k, n, c, scale)) for n in (1, 2, 4) for c in (32, 128)]
        paths.append(folder / f"{name}.json")
        save_profile(make_profile(name, machine, samples, ("linear",)), paths[-1])
    return paths
