"""The batching thresholds of a run: given in the config, defaulted, or ``auto`` from the throughput model.

``auto`` needs two inputs measured on this machine: a calibration profile per model (step latency as a function
of batch size; ``tokenrouter calibrate`` writes them under ``calibration/<hardware tag>/<model>.json``) and
routing statistics (P, C: from recorded routing traces, or the routing program's own ``P``/``C`` parameters).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.config import ServeConfig

#: Context length per request at which profile latencies are evaluated (a typical short chat turn).
TYPICAL_CONTEXT = 256
REPO_CALIBRATION_DIR = Path(__file__).resolve().parents[1] / "calibration"


def resolve_thresholds(cfg: ServeConfig, model_paths: Sequence[str] = ()) -> list[int]:
    """One threshold per model (default 1: launch as soon as anything is ready)."""
    given = cfg.batching.thresholds
    if given is None or cfg.mode != "routed":
        return [1] * cfg.num_models
    if given == "auto":
        return auto_thresholds(cfg)
    for i, (b, m) in enumerate(zip(given, cfg.models, strict=True)):
        if not 1 <= b <= m.max_num_seqs:
            raise ConfigError(f"batching.thresholds.{i}", f"must be within 1..{m.max_num_seqs} (max_num_seqs), got {b}")
    return list(given)


def hardware_tag() -> str:
    """This machine's profile directory name (as the calibration tools name it): 'cpu-<n>core' or the GPU's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible not in (None, ""):
        try:
            import torch

            if torch.cuda.is_available():
                words = torch.cuda.get_device_name(0).replace("_", " ").split()
                kept = [w for w in words if w.lower() not in {"nvidia", "geforce", "tesla", "amd", "radeon"}]
                return "-".join(kept or words).lower()
        except ImportError:
            pass
    return f"cpu-{os.cpu_count()}core"


def load_profile(cfg: ServeConfig, model: int) -> dict[str, Any]:
    """Model ``model``'s calibration profile for this machine, or a ConfigError that says how to make one."""
    base = Path(cfg.batching.auto.calibration_dir) if cfg.batching.auto.calibration_dir else REPO_CALIBRATION_DIR
    tag = hardware_tag()
    name = cfg.models[model].name
    path = base / tag / f"{name}.json"
    if not path.is_file():
        raise ConfigError(
            "batching.thresholds",
            f"auto needs a calibration profile of model {name!r} on this machine ({tag}), but {path} does not "
            "exist; run `tokenrouter calibrate` first, or give the thresholds as a list",
        )
    profile: dict[str, Any] = json.loads(path.read_text())
    return profile


def profile_latency(profile: dict[str, Any], batch_size: int, context: int = TYPICAL_CONTEXT) -> float:
    """Decode-step latency (s) at ``batch_size`` from the profile's linear fit."""
    fits = profile.get("fits") or {}
    if "linear" not in fits:
        raise ConfigError("calibration", "profile has no linear latency fit; re-run `tokenrouter calibrate`")
    c = fits["linear"]["coefficients"]
    value = (
        c.get("intercept", 0.0)
        + c.get("batch_size", 0.0) * batch_size
        + c.get("total_context", 0.0) * batch_size * context
    )
    return max(float(value), 1e-6)


def routing_matrices(cfg: ServeConfig) -> tuple[list[list[float]], list[list[float]]]:
    """P and C: from recorded routing traces (JSONL), or from the routing program's ``P``/``C`` parameters."""
    traces = cfg.batching.auto.routing_traces
    if traces:
        from trcore.routing_stats import estimate_routing_stats

        lines = [json.loads(line) for line in Path(traces).read_text().splitlines() if line.strip()]
        stats = estimate_routing_stats(lines, num_models=cfg.num_models)
        return [list(r) for r in stats.P], [list(r) for r in stats.C]
    params = cfg.router.params
    if "P" in params:
        n = cfg.num_models
        return params["P"], params.get("C") or [[1.0] * n for _ in range(n)]
    raise ConfigError(
        "batching.auto.routing_traces",
        "auto thresholds need routing statistics: record traces of this routing program (JSONL) and name the file here",
    )


def auto_thresholds(cfg: ServeConfig) -> list[int]:
    """B* = argmax of the throughput model at the configured concurrency."""
    profiles = [load_profile(cfg, m) for m in range(cfg.num_models)]
    P, C = routing_matrices(cfg)
    try:
        from trcore.throughput import ThroughputModel  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ConfigError("batching.thresholds", "auto needs trcore.throughput, missing from this install") from None
    max_batch = cfg.batching.max_batch or min(m.max_num_seqs for m in cfg.models)
    latency = [[profile_latency(p, b) for b in range(1, max_batch + 1)] for p in profiles]
    model = ThroughputModel(P, C, latency)
    best = model.optimize(cfg.batching.auto.concurrency)
    return [int(b) for b in getattr(best, "thresholds", best)]
