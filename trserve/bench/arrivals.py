"""Arrival times for open-loop load: Poisson at a rate (seeded) or read from a trace file.

Times are seconds from the run's start, non-decreasing. A Poisson schedule draws exponential gaps of mean
``1 / rate`` from ``random.Random(seed)``, as the simulator's Poisson workload does (``trsim.workload``), so a
seed gives the same times on every machine. A trace file holds one time per line (``#`` comments and blank lines
skipped), a JSON list of numbers, or JSON lines with an ``arrival_s`` field; times are finite seconds >= 0 and
must not decrease.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore import ConfigError


@dataclass(frozen=True)
class Arrivals:
    """When each request of an open-loop run is sent (seconds from the start) and where the times came from."""

    times_s: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        if any(t < 0 for t in self.times_s):
            raise ConfigError("arrivals", f"{self.source}: times must be >= 0")
        if any(b < a for a, b in zip(self.times_s, self.times_s[1:], strict=False)):
            raise ConfigError("arrivals", f"{self.source}: times must not decrease")

    def within(self, end_s: float) -> tuple[float, ...]:
        """The times before ``end_s``."""
        return tuple(t for t in self.times_s if t < end_s)

    def rate_rps(self, start_s: float, end_s: float) -> float:
        """Offered rate: arrivals in [start_s, end_s) per second."""
        return sum(start_s <= t < end_s for t in self.times_s) / (end_s - start_s)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "num_arrivals": len(self.times_s)}


def poisson(rate_rps: float, duration_s: float, seed: int = 0) -> Arrivals:
    """Poisson arrivals at ``rate_rps`` for ``duration_s`` seconds from ``random.Random(seed)``."""
    if not rate_rps > 0:
        raise ConfigError("--rate", f"must be > 0 requests/s, got {rate_rps}")
    if not duration_s > 0:
        raise ConfigError("arrivals.duration_s", f"must be > 0, got {duration_s}")
    rng, t = random.Random(seed), 0.0
    times: list[float] = []
    while True:
        t += rng.expovariate(rate_rps)
        if t >= duration_s:
            return Arrivals(tuple(times), f"poisson {rate_rps:g}/s seed {seed}")
        times.append(t)


def read_trace(path: str | Path) -> Arrivals:
    """Arrival times from a file (see the module's docstring); a bad line raises naming file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("--arrivals", f"{path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ConfigError("--arrivals", f"{path}: not a text file") from None
    if text.lstrip().startswith("["):
        values: list[tuple[str, Any]] = [(f"{path.name}[{k}]", v) for k, v in enumerate(_json(text, path.name))]
    else:
        lines = [(n, line.split("#", 1)[0].strip()) for n, line in enumerate(text.splitlines(), 1)]
        values = [(f"{path.name}:{n}", _line_value(line, f"{path.name}:{n}")) for n, line in lines if line]
    if not values:
        raise ConfigError("--arrivals", f"{path}: holds no arrival times")
    times = [_seconds(v, where) for where, v in values]
    for (where, _), before, t in zip(values[1:], times, times[1:], strict=False):
        if t < before:
            raise ConfigError("--arrivals", f"{where}: {t:g} s comes before the previous arrival ({before:g} s)")
    return Arrivals(tuple(times), f"trace {path.name}")


def _line_value(line: str, where: str) -> Any:
    if line.startswith("{"):
        obj = _json(line, where)
        if not isinstance(obj, dict) or "arrival_s" not in obj:
            raise ConfigError("--arrivals", f"{where}: a JSON line needs an arrival_s field")
        return obj["arrival_s"]
    return line


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("--arrivals", f"{where}: not JSON ({exc.msg})") from exc


def _seconds(value: Any, where: str) -> float:
    # JSON true is no time (float(True) would read it as 1 s), nor is "1_0" (float reads Python's digit groups: 10 s)
    if isinstance(value, bool) or (isinstance(value, str) and "_" in value):
        raise ConfigError("--arrivals", f"{where}: expected seconds, got {value!r}")
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ConfigError("--arrivals", f"{where}: expected seconds, got {value!r}") from None
    if not math.isfinite(t):  # first: NaN is not "below 0"
        raise ConfigError("--arrivals", f"{where}: times must be finite, got {value!r}")
    if t < 0:
        raise ConfigError("--arrivals", f"{where}: times must be >= 0, got {value!r}")
    return t
