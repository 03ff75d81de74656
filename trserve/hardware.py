"""Which machine this is, as the name of its calibration profile folder (``calibration/profiles/<tag>/``).

A GPU machine is named after its first visible GPU (``NVIDIA H200`` -> ``h200``), read from ``nvidia-smi`` so
that no CUDA library is imported; a CPU machine is ``cpu-<n>core``. The folder name alone does not say which CPU
model measured a profile, so every profile records its hardware (``machine.cpu_model`` or ``machine.accelerator``)
and :func:`check_profile_hardware` refuses one measured on other hardware than this machine's.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trserve.paths import calibration_dir
from trsim.profile import LatencyProfile, load_profile

VENDOR_WORDS = {"nvidia", "geforce", "tesla", "amd", "radeon"}


def tag_for(accelerator: str | None) -> str:
    """Profile folder name for an accelerator's name, or for this CPU machine when None."""
    if not accelerator:
        return f"cpu-{os.cpu_count()}core"
    words = accelerator.replace("_", " ").split()
    kept = [w for w in words if w.lower() not in VENDOR_WORDS]
    return "-".join(kept or words).lower()


def local_gpu_name() -> str | None:
    """The first visible NVIDIA GPU's name, or None (no GPU visible, or no ``nvidia-smi``)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in (None, "") or not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return names[0] if names else None


def hardware_tag() -> str:
    """This machine's profile folder name."""
    return tag_for(local_gpu_name())


def cpu_model() -> str:
    """This machine's CPU model (``/proc/cpuinfo`` "model name"; elsewhere what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check_profile_hardware(machine: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a calibration profile measured on other hardware: its ``machine`` block must name this machine's
    GPU (``accelerator``) or, without a GPU, this machine's CPU model (``cpu_model``). The error names both."""
    gpu = local_gpu_name()
    key, here = ("accelerator", gpu) if gpu else ("cpu_model", cpu_model())
    recorded = machine.get(key)
    if recorded != here:
        raise ConfigError(
            "calibration",
            f"{path} was measured on {recorded or f'hardware it does not record ({key} missing)'}, but this machine "
            f"is {here}; calibrate this machine (`tokenrouter calibrate`) instead of reusing another's profile",
        )


def profile_path(cfg: ServeConfig, model: int) -> Path:
    """Where model ``model``'s profile for this machine lives: ``<calibration dir>/<tag>/<name>.json``, the
    calibration dir being ``batching.auto.calibration_dir`` or the project's ``calibration/profiles``."""
    given = cfg.batching.auto.calibration_dir
    base = Path(given) if given else calibration_dir("profiles")
    return base / hardware_tag() / f"{cfg.models[model].name}.json"


def read_machine_profile(path: Path) -> LatencyProfile:
    """The profile at ``path``, refused (ConfigError naming both) when it was measured on other hardware."""
    profile = load_profile(path)
    check_profile_hardware(profile.machine.model_dump(), path)
    return profile
