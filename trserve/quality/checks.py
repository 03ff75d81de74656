"""Up-front checks of the quality tool's input, so that bad input is refused before a scorer loads or an engine
starts: the served models must be real checkpoints, every sweep point must build its routing program, a results
document must hold what operating points are picked from, and its model pair must be the one saved to."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trcore import PROGRAMS
from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trserve.pairs.fill import with_pair_router
from trserve.quality.sweep import SweepPoint
from trsim.pairs import load_pair

#: What a results row must hold for an operating point to be picked from it (and its type).
ROW_KEYS: dict[str, type | tuple[type, ...]] = {"name": str, "program": str, "params": dict,
    "large_share": (int, float), "accuracy": (int, float), "relative_accuracy": (int, float)}  # fmt: skip


def check_engines(cfg: ServeConfig, option: str) -> None:
    """Quality is measured on real engines: a config whose models have no checkpoints (emulated or hash engines
    write stand-in tokens) is refused, naming ``option``."""
    if cfg.backend == "vllm" and all(m.path is not None for m in cfg.models):
        return
    whose = f"pair {cfg.pair}" if cfg.pair else "this config"
    raise ConfigError(
        option, f"{whose} has no checkpoints to measure here (backend: {cfg.backend}, whose engines write stand-in "
        "tokens); quality needs real models: a pair with checkpoints (local-smollm2, `tokenrouter models prepare`) "
        "or a --config with model paths and backend: vllm",
    )  # fmt: skip


def check_points(points: Iterable[SweepPoint], pair: str | None, num_models: int, option: str) -> None:
    """Build every point's routing program on every model, as the server will: bad parameters (``tau=nan``, an
    unknown key, a threshold out of range, a pair without the router) are refused naming ``option``."""
    for point in points:
        params = with_pair_router(point.program, point.params, pair)
        try:
            for model in range(num_models):
                PROGRAMS.create(point.program, model, num_models, **params)
        except ConfigError as exc:
            raise ConfigError(option, f"{point.program} {dict(point.params)}: {exc}") from None


def load_results(path: Path) -> dict[str, Any]:
    """A results document (``quality.json``) checked for what operating points are picked from (``--from``)."""
    if not path.is_file():
        raise ConfigError("--from", f"{path}: no such file")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError("--from", f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise ConfigError("--from", f"{path}: expected the object `tokenrouter quality` writes, got {_kind(doc)}")
    if not isinstance(doc.get("command"), str):
        raise ConfigError("--from", f"{path}: no 'command' (the command that made the results)")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ConfigError("--from", f"{path}: no 'rows' (a list of sweep points)")
    for k, row in enumerate(rows):
        _check_row(row, f"{path}: rows[{k}]")
    if doc.get("pair") is not None and not isinstance(doc["pair"], str):
        raise ConfigError("--from", f"{path}: 'pair' must be a pair name, got {doc['pair']!r}")
    return doc


def _check_row(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise ConfigError("--from", f"{where}: expected an object, got {_kind(row)}")
    for key, kind in ROW_KEYS.items():
        value = row.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError("--from", f"{where}: {key!r} missing or not a {_names(kind)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError("--from", f"{where}: {key!r} is not finite")
    probes = row.get("probe_answers", {})
    if not isinstance(probes, dict) or not all(isinstance(a, str) for a in probes.values()):
        raise ConfigError("--from", f"{where}: 'probe_answers' must map prompts to answer strings")


def results_pair(doc: Mapping[str, Any], path: Path, pair: str | None, save: bool) -> str | None:
    """The model pair the results of ``path`` were measured on: the one they record; ``--pair`` naming another
    is refused, and results recording none (older files) cannot be saved as any pair's operating points."""
    recorded = doc.get("pair")
    if recorded is not None and pair is not None and pair != recorded:
        raise ConfigError("--pair", f"{path} holds measurements of pair {recorded}, not {pair}")
    if recorded is None and save:
        raise ConfigError(
            "--save-operating-point", f"{path} records no model pair (written before results named theirs), so its "
            "points cannot be saved as any pair's; re-measure with `tokenrouter quality --pair NAME`",
        )  # fmt: skip
    return recorded if recorded is not None else pair


def operating_points_file(pair: str | None, option: str) -> Path:
    """Where the operating points of ``pair`` are saved: the file its ``pair.yaml`` lists (none is refused: a
    file it does not list would be read by nothing)."""
    if pair is None:
        raise ConfigError(option, "the config names no model pair (pair:), so no pair's operating points; give --pair")
    path = load_pair(pair).operating_points_path()
    if path is None:
        raise ConfigError(
            option, f"pair {pair} lists no operating points file (operating_points: in its pair.yaml); add one first"
        )
    return path


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else type(value).__name__


def _names(kind: type | tuple[type, ...]) -> str:
    return {str: "string", dict: "object"}.get(kind, "number") if isinstance(kind, type) else "number"
