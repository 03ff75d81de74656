"""The checks `tokenrouter plan` runs on its options before any worker starts: the device and dtype, the models'
names and shapes, the node's GPUs. An unknown device or shape names the option the user typed (``--hardware``,
``--models``), not the library's parameter (``hardware``, ``shape``)."""

from __future__ import annotations

from typing import Any

from tokenrouter.errors import named_as_options
from trcore.errors import ConfigError

#: The most GPUs ``plan`` searches (one node; 64 take about 20 s, 1,000 did not finish in minutes).
MAX_NODE_GPUS = 64


def check_device(hardware: str, dtype: str) -> None:
    """``--hardware`` names a device of the table, with a peak figure for ``--dtype``."""
    from trsim.hardware import load_hardware

    with named_as_options("hardware"):
        device = load_hardware(hardware)
    with named_as_options("dtype"):
        device.peak_flops(dtype)


def parse_models(text: str) -> dict[str, str]:
    """``--models``: ``name=shape,name=shape`` (at least two, each name once) as {name: shape}."""
    pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
    if not pairs or any(len(p) != 2 or not p[0].strip() or not p[1].strip() for p in pairs):
        raise ConfigError("--models", f"expected name=shape,name=shape, got {text!r}")
    names = [name.strip() for name, _ in pairs]
    if len(names) < 2:
        raise ConfigError("--models", f"routing needs at least two models, got {names}")
    if len(set(names)) != len(names):
        raise ConfigError("--models", f"each model needs its own name, got {names}")
    return {name.strip(): shape.strip() for name, shape in pairs}


def node_gpus(gpus: int) -> int:
    """``--gpus``: one node's, 1..:data:`MAX_NODE_GPUS` (the search grows with every split of them)."""
    if not 1 <= gpus <= MAX_NODE_GPUS:
        raise ConfigError("--gpus", f"one node's GPUs, 1..{MAX_NODE_GPUS} (nodes are not planned together), got {gpus}")
    return gpus


def check_inputs(cfg: Any, models_option: str) -> None:
    """Fail on bad names and matrices before any worker starts; an unknown shape names ``models_option`` (the
    option that gave the shapes: ``--models``, or ``--pair`` for the pair's own)."""
    from trcore.routers import validate_matrix
    from trsim.hardware import load_hardware
    from trsim.shapes import load_shape
    from trsim.workload import preset

    with named_as_options("hardware"):
        load_hardware(cfg.hardware)
    with named_as_options("shape", option=models_option):
        for shape in cfg.models.values():
            load_shape(shape)
    preset(cfg.workload)
    validate_matrix("--P", cfg.P, len(cfg.models), stochastic=True)
    validate_matrix("--C", cfg.C, len(cfg.models), stochastic=False)
