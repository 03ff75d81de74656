"""Token-length distributions for prompts and outputs, registered by name (``constant``, ``uniform``,
``lognormal``, ``empirical``), plus length pairs read from a file."""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trcore import ConfigError


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts. ``kind`` picks the sampler; every sample is clipped to
    ``[minimum, maximum]``.

    * ``constant``: ``value``;
    * ``uniform``: integers in ``[low, high]``;
    * ``lognormal``: ``median * exp(sigma * N(0, 1))``, rounded;
    * ``empirical``: drawn uniformly from ``values``.
    """

    kind: str = "constant"
    value: int = 1
    low: int = 1
    high: int = 1
    median: float = 1.0
    sigma: float = 0.0
    values: tuple[int, ...] = ()
    minimum: int = 1
    maximum: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _SAMPLERS:
            raise ConfigError("kind", f"unknown length distribution {self.kind!r}; valid: {', '.join(_SAMPLERS)}")
        checks = {
            "value": self.value >= 1,
            "low": 1 <= self.low <= self.high,
            "median": self.median > 0,
            "sigma": self.sigma >= 0,
            "values": self.kind != "empirical" or (bool(self.values) and min(self.values) >= 1),
            "minimum": self.minimum >= 1,
            "maximum": self.maximum is None or self.maximum >= self.minimum,
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(
                    name,
                    f"invalid {self.kind} length distribution: {name} = {getattr(self, name)!r} "
                    "(lengths must be positive; low <= high; maximum >= minimum)",
                )

    def sample(self, rng: random.Random) -> int:
        n = _SAMPLERS[self.kind](self, rng)
        n = max(n, self.minimum)
        return n if self.maximum is None else min(n, self.maximum)

    def scaled(self, factor: float) -> LengthDist:
        """The same shape with every length (value, bounds, median, samples, clip limits) times ``factor``, rounded
        and at least 1: a preset shrunk so a short run covers several request lifetimes."""
        if not 0 < factor < math.inf:  # NaN too
            raise ConfigError("length_scale", f"must be > 0 and finite, got {factor}")

        def n(x: float) -> int:
            return max(1, round(x * factor))

        return replace(self, value=n(self.value), low=n(self.low), high=max(n(self.high), n(self.low)),
                       median=self.median * factor, values=tuple(n(v) for v in self.values), minimum=n(self.minimum),
                       maximum=None if self.maximum is None else n(self.maximum))  # fmt: skip

    @property
    def mean_hint(self) -> float:
        """A rough mean, for reports (not used by sampling)."""
        if self.kind == "constant":
            return float(self.value)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        if self.kind == "empirical":
            return sum(self.values) / len(self.values)
        return self.median * math.exp(self.sigma**2 / 2)


_SAMPLERS: dict[str, Callable[[LengthDist, random.Random], int]] = {
    "constant": lambda d, rng: d.value,
    "uniform": lambda d, rng: rng.randint(d.low, d.high),
    "lognormal": lambda d, rng: round(d.median * math.exp(d.sigma * rng.gauss(0.0, 1.0))),
    "empirical": lambda d, rng: d.values[rng.randrange(len(d.values))],
}


def constant(n: int) -> LengthDist:
    return LengthDist("constant", value=n)


def lognormal(median: float, sigma: float, maximum: int | None = None, minimum: int = 1) -> LengthDist:
    return LengthDist("lognormal", median=median, sigma=sigma, minimum=minimum, maximum=maximum)


@dataclass(frozen=True)
class LengthPairs:
    """(prompt, output) token counts taken in order and cycled: replays a recorded request mix."""

    pairs: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.pairs:
            raise ConfigError("lengths_file", "holds no (num_prompt_tokens, num_output_tokens) pairs")
        for k, (p, o) in enumerate(self.pairs):
            if p < 1 or o < 1:
                raise ConfigError(f"lengths_file[{k}]", f"lengths must be >= 1, got prompt {p}, output {o}")

    def pair(self, index: int) -> tuple[int, int]:
        return self.pairs[index % len(self.pairs)]


def read_length_pairs(path: str | Path) -> LengthPairs:
    """Read pairs from JSONL / JSON (objects with ``num_prompt_tokens`` and ``num_output_tokens``) or CSV
    (a header with those two columns)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".csv":
        rows: Sequence[Any] = list(csv.DictReader(text.splitlines()))
    elif path.suffix == ".json":
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(rows, list):
        raise ConfigError("lengths_file", f"{path}: expected a list of objects")
    return LengthPairs(tuple(_pair(row, f"lengths_file[{k}]") for k, row in enumerate(rows)))


def _pair(row: Any, where: str) -> tuple[int, int]:
    try:
        return int(row["num_prompt_tokens"]), int(row["num_output_tokens"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(where, "needs integer num_prompt_tokens and num_output_tokens") from None
