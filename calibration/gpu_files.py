"""The files of calibration/gpu_profile.py: shape configs in, validated profiles out (atomically), and its log
lines. Standard library only at import time, like the script itself."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The profile schema this writes (``trsim/profile.py``).
SCHEMA_VERSION = 1


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def find_shapes(shapes_dir: Path) -> dict[str, Path]:
    """Shape configs by model name: ``<name>.json`` or ``<name>/config.json`` holding a ``model_type``."""
    candidates = {p.stem: p for p in sorted(shapes_dir.glob("*.json"))}
    candidates.update({p.parent.name: p for p in sorted(shapes_dir.glob("*/config.json"))})
    return {name: p for name, p in candidates.items() if "model_type" in _read_json(p)}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_config(path: Path) -> Any:
    from transformers import AutoConfig

    data = _read_json(path)
    return AutoConfig.for_model(data.pop("model_type"), **data)


def profile_record(llm: str, backend: str, machine: dict[str, Any], samples: list[dict[str, Any]],
                   fits: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """A profile in the schema's terms: the best fit first in ``fits`` becomes ``fit``, the rest ``other_fits``."""
    return {"schema_version": SCHEMA_VERSION, "llm": llm, "backend": backend,
            "created": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine, "samples": samples,
            "fit": fits[0] if fits else None, "other_fits": fits[1:]}  # fmt: skip


def write_profile(profile: dict[str, Any], out_dir: Path) -> Path:
    """Validate against the schema when pydantic is here, then write atomically (a run killed mid-write
    never leaves a truncated profile)."""
    try:
        from trsim.profile import LatencyProfile
    except ImportError:
        log("note: pydantic not installed, profile written unvalidated")
    else:
        LatencyProfile.model_validate(profile)
    path = out_dir / f"{profile['llm']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(profile, indent=1) + "\n")
    tmp.replace(path)
    return path
