"""Building blocks of the scenario schema shared by its sections: the strict pydantic base, positive numbers,
and length specs (a number or a distribution) with their conversion to ``LengthDist``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from trcore import ConfigError
from trsim.lengths import LengthDist

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Strict(BaseModel):
    """Unknown keys are errors; values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LengthSpec(Strict):
    dist: Literal["constant", "uniform", "lognormal", "empirical"] = "constant"
    value: int = Field(default=1, ge=1)
    low: int = Field(default=1, ge=1)
    high: int = Field(default=1, ge=1)
    median: Positive = 1.0
    sigma: float = Field(default=0.0, ge=0)
    values: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)


Length = Annotated[int, Field(ge=1)] | LengthSpec


def length_dist(value: int | LengthSpec | None, where: str) -> LengthDist | None:
    """The length distribution a spec describes (None for None); errors name ``where``."""
    if value is None:
        return None
    if isinstance(value, int):
        return LengthDist("constant", value=value)
    fields = {**value.model_dump(exclude={"dist", "min", "max"}), "values": tuple(value.values)}
    try:
        return LengthDist(value.dist, **fields, minimum=value.min, maximum=value.max)
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc.field}", exc.problem) from None


class KVSpec(BaseModel):
    """A model's KV cache in a scenario file: ``tokens`` (a number, or ``auto``: the capacity its latency profile's
    engine recorded, else the roofline's HBM figure) or ``blocks``; ``block_size`` and ``max_seqs`` default to
    the profile's engine record, else 16 and no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    tokens: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    blocks: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    max_seqs: int | None = Field(default=None, ge=1)
