"""Which machine this is, as the name of its calibration profile folder (``calibration/profiles/<tag>/``).

A GPU machine is named after its first visible GPU (``NVIDIA H200`` -> ``h200``), read from ``nvidia-smi`` so
that no CUDA library is imported; a CPU machine is ``cpu-<n>core``.
"""

from __future__ import annotations

import os
import shutil
import subprocess

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
