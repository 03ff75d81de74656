"""The ``models/<pair>/pair.yaml`` format (pydantic, validated at load): one model pair and what belongs to it.

Every figure carries its ``source``: a committed JSON file (a repository path) or a publication and where in it.
Paths inside a pair (routers, operating points) are relative to the pair's folder; ``profiles`` and ``source``
paths are relative to the repository root (they exist only in a checkout). The fields, by example:
``models/local-smollm2/pair.yaml`` and docs/models.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trcore.errors import ConfigError
from trcore.routers import validate_keep_matrix, validate_matrix

#: A model's role in a pair; model index = position in ``models`` (0 small, 1 large), as the programs expect.
ROLES = ("small", "large")
#: The largest batch size a latency table may list: ``by_batch_size`` expands it to one entry per batch size.
MAX_BATCH_SIZE = 4096


class PairSection(BaseModel):
    """A section of ``pair.yaml``: an unknown field is an error, a value of another type is refused rather than
    coerced (``"151936"`` or ``true`` is not an integer), and the values are frozen.

    A check that raises :class:`~trcore.errors.ConfigError` names its field relative to the section
    (``ms.small.1``); :func:`trsim.pairs.read_pair_file` puts the section's place in front of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _is_number(value: object) -> bool:
    """A real number, not a bool (YAML's ``true``) and not text."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _positive_ms(value: object, field: str) -> None:
    if not _is_number(value) or not 0 < float(value) < math.inf:  # type: ignore[arg-type]
        raise ConfigError(field, f"must be a positive finite number of ms, got {value!r}")


def _numeric_rows(rows: object, size: int) -> None:
    """``rows``: ``size`` lists of ``size`` finite numbers (fields ``i.j`` where an entry is not one)."""
    if not isinstance(rows, list) or len(rows) != size or any(not isinstance(r, list) or len(r) != size for r in rows):
        raise ConfigError("", f"must be {size} x {size}: one row per model, each with one entry per model")
    for i, row in enumerate(rows):
        for j, x in enumerate(row):
            if not _is_number(x) or not math.isfinite(x):
                raise ConfigError(f"{i}.{j}", f"must be a finite number, got {x!r}")


class TokenizerSpec(PairSection):
    """The tokenizer both models share: its published name, its number of ids, and (where the files are at hand)
    the sha256 of its id -> token table (:func:`trsim.pair_identity.tokenizer_identity`)."""

    name: str = Field(min_length=1)
    vocab_size: int = Field(ge=1)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    source: str = Field(min_length=1)

    @property
    def identity(self) -> str:
        """What two pairs must share for one's router to serve the other: the hash, else the published name."""
        return f"sha256:{self.sha256}" if self.sha256 else f"name:{self.name}"


class Dims(PairSection):
    """The dimensions compared with a served checkpoint's ``config.json``."""

    num_hidden_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)


class ModelSpec(PairSection):
    """One model of the pair: a shape config (``models/shapes/<shape>.json``, no weights) or a checkpoint recipe
    (how ``tokenrouter models prepare`` builds it, with the ``dims`` it has)."""

    name: str = Field(min_length=1)
    published: str | None = None
    shape: str | None = None
    recipe: dict[str, str | int | float] | None = None
    dims: Dims | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ModelSpec:
        if (self.shape is None) == (self.recipe is None):
            raise ValueError("give exactly one of shape and recipe")
        if self.recipe is not None and self.dims is None:
            raise ConfigError("dims", "a recipe model needs dims (num_hidden_layers, hidden_size, vocab_size)")
        if self.shape is not None and self.dims is not None:
            raise ConfigError("dims", "give shape or dims, not both (a shape model's dims are read from its shape)")
        return self


class RouterSpec(PairSection):
    """A router trained for this pair: its weights and the record of its training."""

    weights: str
    record: str


class LatencySpec(PairSection):
    """Step latencies of the pair's models on one device, ms per model name, and where the figures come from: a
    constant per model, or with ``batch_sizes`` one value per listed batch size."""

    hardware: str = Field(min_length=1)
    ms: dict[str, float | list[float]]
    batch_sizes: list[int] | None = None
    note: str | None = None
    source: str = Field(min_length=1)

    @field_validator("ms", mode="before")
    @classmethod
    def _positive(cls, ms: Any) -> Any:
        """Every latency a positive finite number (NaN, inf, 0 and negatives are refused here, not later)."""
        for name, value in ms.items() if isinstance(ms, dict) else ():
            for k, x in enumerate(value) if isinstance(value, list) else [(None, value)]:
                _positive_ms(x, str(name) if k is None else f"{name}.{k}")
        return ms

    @model_validator(mode="after")
    def _aligned(self) -> LatencySpec:
        sizes = self.batch_sizes
        if sizes is not None:
            _check_batch_sizes(sizes)
        for name, value in self.ms.items():
            if sizes is None and isinstance(value, list):
                raise ConfigError(f"ms.{name}", "a list needs batch_sizes (one value per batch size); else a number")
            if sizes is not None and (not isinstance(value, list) or len(value) != len(sizes)):
                raise ConfigError(f"ms.{name}", f"needs one value per entry of batch_sizes ({len(sizes)}), got {value}")
        return self

    def by_batch_size(self, name: str) -> float | list[float]:
        """Model ``name``'s latency: a constant, or a list by batch size from 1 (linear between measured sizes,
        flat beyond the last) as the latency options of the analytic tools read it."""
        value = self.ms[name]
        if not isinstance(value, list) or self.batch_sizes is None:
            return value
        return [round(float(np.interp(b, self.batch_sizes, value)), 4) for b in range(1, max(self.batch_sizes) + 1)]


def _check_batch_sizes(sizes: Sequence[int]) -> None:
    if not sizes:
        raise ConfigError("batch_sizes", "must list at least one batch size (or leave batch_sizes out)")
    for k, size in enumerate(sizes):
        if not 1 <= size <= MAX_BATCH_SIZE:
            raise ConfigError(f"batch_sizes.{k}", f"must lie in [1, {MAX_BATCH_SIZE}], got {size}")
        if k and size <= sizes[k - 1]:
            raise ConfigError(
                f"batch_sizes.{k}", f"{size} follows {sizes[k - 1]}: list batch sizes in increasing order, once each"
            )


class RoutingSpec(PairSection):
    """Routing statistics of one router on this pair: P (where each model's tokens go next) and C (which of them
    are kept), as the throughput model and the ``markov`` program read them, checked as they check them: rows of
    P sum to 1, every entry of P and C lies in [0, 1], one row and column per model."""

    router: str = Field(min_length=1)
    P: list[list[float]]
    C: list[list[float]]
    source: str = Field(min_length=1)

    @field_validator("P", "C", mode="before")
    @classmethod
    def _square(cls, rows: Any) -> Any:
        _numeric_rows(rows, len(ROLES))
        return rows

    @model_validator(mode="after")
    def _stochastic(self) -> RoutingSpec:
        validate_matrix("P", self.P, len(ROLES), stochastic=True)
        validate_keep_matrix(self.C, len(ROLES))
        return self


class PairSpec(PairSection):
    """A whole ``pair.yaml``."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    description: str = Field(min_length=1)
    tokenizer: TokenizerSpec
    models: list[ModelSpec] = Field(min_length=2, max_length=2)
    routers: dict[str, RouterSpec] = Field(default_factory=dict)
    operating_points: str | None = None
    latencies: list[LatencySpec] = Field(default_factory=list)
    routing: list[RoutingSpec] = Field(default_factory=list)
    profiles: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_agree(self) -> PairSpec:
        names = [m.name for m in self.models]
        if names != list(ROLES):
            raise ConfigError("models", f"must be named {list(ROLES)} in that order (small first), got {names}")
        for i, entry in enumerate(self.latencies):
            if set(entry.ms) != set(names):
                raise ConfigError(f"latencies.{i}.ms", f"needs one entry per model {names}, got {sorted(entry.ms)}")
        _unique("latencies", "hardware", [e.hardware for e in self.latencies])
        _unique("routing", "router", [r.router for r in self.routing])
        return self

    def latency(self, hardware: str | None = None) -> LatencySpec | None:
        """The latencies on ``hardware`` (None: the first listed), or None when the pair has none there."""
        return next((e for e in self.latencies if hardware in (None, e.hardware)), None)

    def routing_stats(self, router: str | None = None) -> RoutingSpec | None:
        """The routing statistics of ``router`` (None: the first listed), or None."""
        return next((r for r in self.routing if router in (None, r.router)), None)


def _unique(section: str, key: str, values: list[str]) -> None:
    """Refuse a second entry of ``section`` with the same ``key``: which one a tool reads would be a guess."""
    for i, value in enumerate(values):
        if value in values[:i]:
            first = values.index(value)
            raise ConfigError(
                f"{section}.{i}.{key}", f"{value!r} is listed twice (also {section}.{first}); give it once"
            )
