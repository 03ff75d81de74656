"""Parsing of the command-line options shared by `throughput`, `optimize`, `simulate` and `sweep`:
routing matrices, per-model latencies, threshold vectors. Bad values raise ConfigError naming the option.

Matrices and vectors are written either as JSON (``[[0.65,0.35],[1,0]]``) or compactly, rows separated by
``;`` and entries by ``,`` (``0.65,0.35;1,0``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from trcore.errors import ConfigError

#: The R2R-like two-model default: SLM keeps 65% of its tokens, hands 35% to the LLM, which regenerates
#: the dropped token and always hands back.
DEFAULT_P = "0.65,0.35;1,0"
DEFAULT_C = "1,0;1,0"
DEFAULT_LATENCY_MS = "6.0,27.9"
DEFAULT_CONCURRENCY = 16


def _numbers(text: str, option: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(option, f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not math.isfinite(v) for v in values):
        raise ConfigError(option, f"expected finite numbers, got {text!r}")
    return values


def _json(text: str, option: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(option, f"invalid JSON ({exc.msg}): {text!r}") from None


def parse_matrix(text: str, option: str) -> list[list[float]]:
    """A square matrix: JSON or ``a,b;c,d``."""
    text = text.strip()
    if text.startswith("["):
        raw = _json(text, option)
        if not isinstance(raw, list) or not all(isinstance(row, list) for row in raw):
            raise ConfigError(option, "expected a list of rows")
        try:
            rows = [[float(x) for x in row] for row in raw]
        except (TypeError, ValueError):
            raise ConfigError(option, "entries must be numbers") from None
    else:
        rows = [_numbers(row, option) for row in text.split(";") if row.strip()]
    if not rows or any(len(row) != len(rows) for row in rows):
        raise ConfigError(option, f"must be square (one row and one column per model), got {text!r}")
    return rows


def parse_vector(text: str, option: str) -> list[float]:
    """Numbers: JSON list or ``a,b,c``."""
    text = text.strip()
    if text.startswith("["):
        raw = _json(text, option)
        if not isinstance(raw, list):
            raise ConfigError(option, "expected a list of numbers")
        return _numbers(",".join(str(x) for x in raw), option)
    return _numbers(text, option)


def parse_ints(text: str, option: str, minimum: int = 1) -> list[int]:
    """Integers >= ``minimum``: JSON list or ``a,b,c``."""
    values = parse_vector(text, option)
    if any(v != int(v) or v < minimum for v in values):
        raise ConfigError(option, f"expected integers >= {minimum}, got {text!r}")
    return [int(v) for v in values]


def parse_thresholds(text: str, num_models: int, option: str = "--thresholds") -> list[int]:
    """One threshold B_i >= 1 per model."""
    values = parse_ints(text, option)
    if len(values) != num_models:
        raise ConfigError(option, f"needs {num_models} values (one per model), got {len(values)}")
    return values


def parse_threshold_grid(text: str, num_models: int, option: str = "--thresholds") -> list[tuple[int, ...]] | None:
    """Threshold vectors separated by ``;`` (``1,1;2,1``), or ``all`` (None: every feasible vector)."""
    if text.strip().lower() == "all":
        return None
    return [tuple(parse_thresholds(part, num_models, option)) for part in text.split(";") if part.strip()]


def check_positive(value: float | None, option: str) -> None:
    if value is not None and not value > 0:
        raise ConfigError(option, f"must be > 0, got {value}")


def check_same_size(matrices: Sequence[Sequence[Sequence[float]]], names: Sequence[str]) -> int:
    """All matrices have the same size; returns it (the number of models)."""
    sizes = {len(m) for m in matrices}
    if len(sizes) != 1:
        shapes = ", ".join(f"{n} is {len(m)}x{len(m)}" for n, m in zip(names, matrices, strict=True))
        raise ConfigError(names[-1], f"matrix sizes differ ({shapes})")
    return sizes.pop()
