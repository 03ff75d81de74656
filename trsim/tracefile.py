"""Reading and writing routing-trace files (JSONL, one request per line, or a JSON list); the format is
described in ``trcore.traces``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trcore import ConfigError
from trcore.traces import RequestTrace, trace_from_dict, trace_to_dict


def read_traces(path: str | Path, num_models: int | None = None) -> list[RequestTrace]:
    """Load traces; a malformed line or field raises ``ConfigError`` naming the file, line and field."""
    path = Path(path)
    text = path.read_text()
    stripped = text.lstrip()
    if stripped.startswith("["):
        objects: list[tuple[str, Any]] = [(f"{path.name}[{k}]", obj) for k, obj in enumerate(_loads(stripped, path))]
    else:
        objects = [
            (f"{path.name}:{n}", _loads(line, path, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()
        ]
    if not objects:
        raise ConfigError("traces", f"{path}: holds no traces")
    return [trace_from_dict(obj, num_models, where=where) for where, obj in objects]


def write_traces(path: str | Path, traces: Iterable[RequestTrace]) -> int:
    """Write traces as JSONL; returns how many were written."""
    lines = [json.dumps(trace_to_dict(t), separators=(",", ":")) for t in traces]
    Path(path).write_text("".join(line + "\n" for line in lines))
    return len(lines)


def _loads(text: str, path: Path, line: int | None = None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{path}:{line}" if line is not None else str(path)
        raise ConfigError("traces", f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
