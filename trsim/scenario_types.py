"""Building blocks of the scenario schema shared by its sections: the strict pydantic base, positive numbers, the
latency section (:class:`LatencySpec`), and length specs (a number or a distribution) with their conversion to
``LengthDist``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trcore import ConfigError
from trsim.lengths import LengthDist

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Strict(BaseModel):
    """Unknown keys are errors, and so are values of another type (``strict``: ``true`` or ``"16"`` where a number
    belongs is refused, not converted); values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


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

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
    tokens: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    blocks: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    max_seqs: int | None = Field(default=None, ge=1)


class LatencySpec(Strict):
    """``{model: constant, ms: 6}``, ``{model: table, batch_sizes: [...], ms: [...]}``,
    ``{model: linear|quadratic, coefficients: {...}}`` (seconds), ``{profile: file.json, model: optional}``, or
    a roofline: ``{model: roofline, hardware: a100-80g, shape: <name>, tp: 2, dtype: bf16, params: {...}}`` or
    ``{model: "roofline:a100-80g:<shape>:tp2"}``; with ``profile`` too, its samples refit the roofline's params."""

    model: str | None = None
    ms: Positive | list[Positive] | None = None
    batch_sizes: list[Annotated[int, Field(ge=1)]] | None = None
    coefficients: dict[str, float] | None = None
    profile: str | None = None
    hardware: str | None = None
    shape: str | None = None
    tp: int = Field(default=1, ge=1)
    dtype: str = "bf16"
    params: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _every_key_read(self) -> LatencySpec:
        """A key the chosen latency model does not read is an error, not a silent no-op."""
        kind = (self.model or "constant").split(":")[0]
        if self.profile is not None and kind != "roofline":
            kind = "profile"  # the profile's fit (``model`` picks among them)
        reads = LATENCY_KEYS.get(kind, {"model", "coefficients"})
        if kind == "roofline" and self.model and ":" in self.model:
            reads = {"model", "params", "profile"}  # the string names hardware, shape and tp
        unread = sorted(set(self.model_fields_set) - reads)
        if unread:
            raise ValueError(f"latency model {kind!r} does not read {', '.join(unread)}")
        return self


#: The keys each kind of scenario latency model reads (other kinds: ``coefficients``).
LATENCY_KEYS = {
    "constant": {"model", "ms"},
    "table": {"model", "ms", "batch_sizes"},
    "profile": {"model", "profile"},
    "roofline": {"model", "hardware", "shape", "tp", "dtype", "params", "profile"},
}
