"""The ``models/<pair>/pair.yaml`` format (pydantic, validated at load): one model pair and what belongs to it.

Every figure carries its ``source``: a committed JSON file (a repository path) or a publication and where in it.
Paths inside a pair (routers, operating points) are relative to the pair's folder; ``profiles`` and ``source``
paths are relative to the repository root (they exist only in a checkout). The fields, by example:
``models/local-smollm2/pair.yaml`` and docs/models.md.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

#: A model's role in a pair; model index = position in ``models`` (0 small, 1 large), as the programs expect.
ROLES = ("small", "large")


class PairSection(BaseModel):
    """A section of ``pair.yaml``: an unknown field is an error and the values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
            raise ValueError("a recipe model needs dims (num_hidden_layers, hidden_size, vocab_size)")
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

    @model_validator(mode="after")
    def _aligned(self) -> LatencySpec:
        for name, value in self.ms.items():
            lengths = None if self.batch_sizes is None else len(self.batch_sizes)
            if isinstance(value, list) != (lengths is not None) or (lengths and len(value) != lengths):  # type: ignore[arg-type]
                raise ValueError(f"ms.{name}: a number, or one value per entry of batch_sizes")
        return self

    def by_batch_size(self, name: str) -> float | list[float]:
        """Model ``name``'s latency: a constant, or a list by batch size from 1 (linear between measured sizes,
        flat beyond the last) as the latency options of the analytic tools read it."""
        value = self.ms[name]
        if not isinstance(value, list) or self.batch_sizes is None:
            return value
        return [round(float(np.interp(b, self.batch_sizes, value)), 4) for b in range(1, max(self.batch_sizes) + 1)]


class RoutingSpec(PairSection):
    """Routing statistics of one router on this pair: P (where each model's tokens go next) and C (which of them
    are kept), as the throughput model and the ``markov`` program read them."""

    router: str = Field(min_length=1)
    P: list[list[float]]
    C: list[list[float]]
    source: str = Field(min_length=1)


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
            raise ValueError(f"models must be named {list(ROLES)} in that order (small first), got {names}")
        for i, entry in enumerate(self.latencies):
            if set(entry.ms) != set(names):
                raise ValueError(f"latencies.{i}.ms needs one entry per model {names}, got {sorted(entry.ms)}")
        for i, stats in enumerate(self.routing):
            if len(stats.P) != len(names) or len(stats.C) != len(names):
                raise ValueError(f"routing.{i}: P and C need one row per model ({len(names)})")
        return self

    def latency(self, hardware: str | None = None) -> LatencySpec | None:
        """The latencies on ``hardware`` (None: the first listed), or None when the pair has none there."""
        return next((e for e in self.latencies if hardware in (None, e.hardware)), None)

    def routing_stats(self, router: str | None = None) -> RoutingSpec | None:
        """The routing statistics of ``router`` (None: the first listed), or None."""
        return next((r for r in self.routing if router in (None, r.router)), None)
