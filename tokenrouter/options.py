"""Parsing of the command-line options shared by `throughput`, `optimize`, `simulate` and `sweep`:
routing matrices, per-model latencies, threshold vectors. Bad values raise ConfigError naming the option.

Matrices and vectors are written either as JSON (``[[0.65,0.35],[1,0]]``) or compactly, rows separated by
``;`` and entries by ``,`` (``0.65,0.35;1,0``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from trcore.errors import ConfigError

#: The pair whose routing statistics and latencies the analytic tools default to: the R2R paper's (the SLM keeps
#: 65% of its tokens, hands 35% to the LLM, which regenerates the dropped token and always hands back; A100 steps
#: of 6.0 and 27.9 ms). ``--pair`` names another; ``--P``, ``--C`` and ``--latency-ms`` override it.
ANALYTIC_PAIR = "r2r-qwen-1.5b-32b"
DEFAULT_CONCURRENCY = 16
PAIR_HELP = "Model pair (models/<pair>/, `tokenrouter models list`): its routing statistics and latencies."


def check_pair(name: str) -> str:
    """``name`` if it is a known pair, else a ConfigError for ``--pair`` listing the valid ones."""
    from trserve.paths import pair_names
    from trsim.pairs import unknown_pair

    if name not in pair_names():
        raise unknown_pair(name, "--pair")
    return name


def pair_defaults(name: str, P: str | None, C: str | None, latency_ms: str | None) -> tuple[str, str, str]:
    """``--P``, ``--C`` and ``--latency-ms`` as given, or else as pair ``name`` states them (JSON text); a pair
    without routing statistics or latencies asks for the flag."""
    from trsim.pairs import load_pair

    spec = load_pair(check_pair(name)).spec
    stats, latency = spec.routing_stats(), spec.latency()
    if (P is None or C is None) and stats is None:
        raise ConfigError("--pair", f"{name} has no routing statistics; give --P and --C")
    if latency_ms is None and latency is None:
        shapes = ",".join(f"roofline:a100-80g:{m.shape}" for m in spec.models if m.shape)
        hint = f" (e.g. {shapes})" if shapes else ""
        raise ConfigError("--pair", f"{name} has no latencies; give --latency-ms{hint}")
    latencies = [latency.by_batch_size(m.name) for m in spec.models] if latency else None
    return (
        P if P is not None else json.dumps(stats.P if stats else None),
        C if C is not None else json.dumps(stats.C if stats else None),
        latency_ms if latency_ms is not None else json.dumps(latencies),
    )


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
    grid = [tuple(parse_thresholds(part, num_models, option)) for part in text.split(";") if part.strip()]
    if len(set(grid)) != len(grid):  # each would be run and reported twice
        raise ConfigError(option, f"a value is given twice: {[list(b) for b in grid]}")
    return grid


def check_positive(value: float | None, option: str) -> None:
    """``value`` (when given) is a finite number above 0, else a one-line error naming ``option`` (an infinite
    window or step would run forever)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(option, f"must be a finite number > 0, got {value}")


def check_seconds(value: float, option: str, minimum: float = 0.0) -> None:
    """``value`` is a finite number of seconds >= ``minimum``, else a one-line error naming ``option`` (an
    infinite warm-up or window would run forever, and a Poisson draw over it never end)."""
    if not (math.isfinite(value) and value >= minimum):
        raise ConfigError(option, f"must be a finite number of seconds >= {minimum:g}, got {value}")


def check_same_size(matrices: Sequence[Sequence[Sequence[float]]], names: Sequence[str]) -> int:
    """All matrices have the same size; returns it (the number of models)."""
    sizes = {len(m) for m in matrices}
    if len(sizes) != 1:
        shapes = ", ".join(f"{n} is {len(m)}x{len(m)}" for n, m in zip(names, matrices, strict=True))
        raise ConfigError(names[-1], f"matrix sizes differ ({shapes})")
    return sizes.pop()


def given(ctx: Any, name: str) -> bool:
    """Whether the user gave option ``name`` of the command whose context (a ``typer.Context``) is ``ctx``: its
    value does not come from the default. Commands refuse options that have no effect in the mode chosen."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def at_least_one(value: int, option: str) -> int:
    """``value`` when it is at least 1, else a one-line error naming ``option``."""
    if value < 1:
        raise ConfigError(option, f"must be >= 1, got {value}")
    return value
