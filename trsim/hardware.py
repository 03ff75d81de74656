"""The hardware table (``trsim/data/hardware.yaml``): datasheet peaks of the devices the roofline model knows."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from trcore import ConfigError

HARDWARE_FILE = Path(__file__).resolve().parent / "data" / "hardware.yaml"
#: Bytes per element of the dtypes the roofline model takes.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Hardware:
    """One device: dense peak FLOP/s by dtype, memory bandwidth (bytes/s), memory (bytes), GPU-to-GPU link
    bandwidth per direction (bytes/s), and the datasheet the figures come from."""

    name: str
    description: str
    flops: dict[str, float]
    memory_bw: float
    memory_bytes: float
    link_bw: float
    source: str

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s in ``dtype``; a dtype the datasheet gives no figure for lists the valid ones."""
        if dtype not in self.flops:
            raise ConfigError("dtype", f"{self.name} has no {dtype!r} peak; valid: {', '.join(sorted(self.flops))}")
        return self.flops[dtype]


def _record(name: str, raw: dict[str, Any]) -> Hardware:
    return Hardware(
        name=name,
        description=raw["description"],
        flops={k: float(v) * 1e12 for k, v in raw["flops_tflops"].items()},
        memory_bw=float(raw["memory_bw_gb_s"]) * 1e9,
        memory_bytes=float(raw["memory_gb"]) * 1e9,
        link_bw=float(raw["link_gb_s"]) * 1e9,
        source=raw["source"],
    )


@cache
def _table(path: Path = HARDWARE_FILE) -> dict[str, Hardware]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return {name: _record(name, entry) for name, entry in raw.items()}


def hardware_names() -> list[str]:
    """Names in the hardware table, sorted."""
    return sorted(_table())


def load_hardware(name: str) -> Hardware:
    """The device called ``name`` (case-insensitive); an unknown name lists the valid ones."""
    table = _table()
    key = name.strip().lower()
    if key not in table:
        raise ConfigError("hardware", f"unknown hardware {name!r}; valid: {', '.join(sorted(table))}")
    return table[key]


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``; unknown dtypes list the valid ones."""
    if dtype not in DTYPE_BYTES:
        raise ConfigError("dtype", f"unknown dtype {dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]
