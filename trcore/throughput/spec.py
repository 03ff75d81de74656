"""Validated inputs of the throughput model: routing matrices and step latencies on an integer time grid."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from numbers import Integral, Real
from typing import Any, TypeGuard

from trcore.errors import ConfigError
from trcore.routers import validate_matrix

#: A per-model latency: seconds for any batch, or seconds indexed by batch size - 1.
LatencySpec = float | Sequence[float]
Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class ChainSpec:
    """The scenario of the throughput model, with latencies converted to integer time units.

    A time unit is ``unit_s`` seconds: the quantum times the gcd of every latency counted in quanta. Dividing
    by the gcd is exact (every residual time in the chain is a sum or difference of latencies); it keeps the
    integers small.
    """

    P: Matrix
    C: Matrix
    latency_units: tuple[tuple[int, ...], ...]
    unit_s: float
    max_batch: tuple[int | None, ...]

    @property
    def num_models(self) -> int:
        return len(self.P)

    @property
    def tokens_per_request_step(self) -> tuple[float, ...]:
        """Expected committed tokens of one request-step on each model: sum_j p_ij c_ij."""
        return tuple(
            math.fsum(p * c for p, c in zip(prow, crow, strict=True)) for prow, crow in zip(self.P, self.C, strict=True)
        )

    def latency(self, model: int, batch: int) -> int:
        """Step latency of ``batch`` requests on ``model`` in time units (past the table: its last entry)."""
        table = self.latency_units[model]
        return table[min(batch, len(table)) - 1]

    def batch_caps(self, num_requests: int) -> tuple[int, ...]:
        """Largest batch each model can run when ``num_requests`` requests are in the system."""
        return tuple(num_requests if cap is None else min(cap, num_requests) for cap in self.max_batch)


#: The most quanta one step may last (the chain's clock; a step of 1e12 ms at 0.1 ms quanta never finished solving).
MAX_QUANTA = 1_000_000


def build_spec(
    P: Sequence[Sequence[float]],
    C: Sequence[Sequence[float]],
    latency_s: Sequence[LatencySpec],
    quantum_s: float,
    max_batch: Sequence[int] | None,
) -> ChainSpec:
    """Validate the model's inputs (raising ``ConfigError`` naming the field) and put latencies on the grid.

    A latency is rounded to the nearest whole number of quanta; one below half a quantum is an error (the
    grid is too coarse to tell it from zero).
    """
    p_matrix = _numeric_matrix("P", P)
    num_models = len(p_matrix)
    if num_models < 1:
        raise ConfigError("P", "needs at least one model (one row)")
    validate_matrix("P", p_matrix, num_models, stochastic=True)
    c_matrix = _numeric_matrix("C", C)
    validate_matrix("C", c_matrix, num_models, stochastic=False)
    if any(not math.isfinite(x) for row in c_matrix for x in row):
        raise ConfigError("C", "entries must be finite")
    quantum = _positive(quantum_s)
    if quantum is None:
        raise ConfigError("quantum_s", f"must be a positive number of seconds, got {quantum_s!r}")
    quanta = _latency_quanta(latency_s, quantum, num_models)
    unit = reduce(math.gcd, (q for table in quanta for q in table))
    return ChainSpec(
        P=p_matrix,
        C=c_matrix,
        latency_units=tuple(tuple(q // unit for q in table) for table in quanta),
        unit_s=quantum * unit,
        max_batch=_max_batch(max_batch, num_models),
    )


def _numeric_matrix(name: str, rows: object) -> Matrix:
    """Rows of real numbers (not yet checked for shape or sign), as floats."""
    if not _is_sequence(rows) or not all(_is_sequence(row) for row in rows):
        raise ConfigError(name, f"must be a list of rows (lists of numbers), got {rows!r}")
    out = []
    for i, row in enumerate(rows):
        if not all(isinstance(x, Real) and not isinstance(x, bool) for x in row):
            raise ConfigError(name, f"row {i} must hold only numbers, got {row!r}")
        out.append(tuple(float(x) for x in row))
    return tuple(out)


def _latency_quanta(latency_s: object, quantum_s: float, num_models: int) -> list[list[int]]:
    if not _is_sequence(latency_s) or len(latency_s) != num_models:
        raise ConfigError("latency_s", f"needs one entry per model ({num_models}), got {latency_s!r}")
    out = []
    for i, entry in enumerate(latency_s):
        table = [entry] if isinstance(entry, Real) else entry
        if not _is_sequence(table) or len(table) == 0:
            raise ConfigError("latency_s", f"model {i}: a number or a non-empty list of numbers, got {entry!r}")
        out.append([_to_quanta(x, quantum_s, i) for x in table])
    return out


def _to_quanta(seconds: object, quantum_s: float, model: int) -> int:
    value = _positive(seconds)
    if value is None:
        raise ConfigError("latency_s", f"model {model}: latencies must be positive numbers, got {seconds!r}")
    if value / quantum_s > MAX_QUANTA:
        raise ConfigError("latency_s", f"model {model}: a step of {value!r} s is over {MAX_QUANTA:,} quanta of "
                          f"{quantum_s!r} s; use a coarser quantum")  # fmt: skip
    quanta = math.floor(value / quantum_s + 0.5)
    if quanta < 1:
        raise ConfigError(
            "quantum_s", f"{quantum_s!r} s is too coarse for model {model}'s latency {value!r} s: use a smaller one"
        )
    return quanta


def _max_batch(max_batch: object, num_models: int) -> tuple[int | None, ...]:
    if max_batch is None:
        return (None,) * num_models
    if not _is_sequence(max_batch) or len(max_batch) != num_models:
        raise ConfigError("max_batch", f"needs one entry per model ({num_models}), got {max_batch!r}")
    caps = []
    for i, cap in enumerate(max_batch):
        if isinstance(cap, bool) or not isinstance(cap, Integral) or cap < 1:
            raise ConfigError("max_batch", f"model {i}: must be an integer >= 1, got {cap!r}")
        caps.append(int(cap))
    return tuple(caps)


def _positive(value: object) -> float | None:
    """``value`` as a float when it is a finite positive real number, else None."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    number = float(value)
    return number if 0 < number < math.inf else None


def _is_sequence(value: object) -> TypeGuard[Sequence[Any]]:
    """Lists, tuples and numpy arrays; not strings or mappings."""
    return hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, str | bytes | Mapping)
