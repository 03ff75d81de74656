"""Which launch decisions the state exploration follows: one threshold vector's, or any feasible vector's.

A launch decision is a bitmask of the idle models that start a step. For fixed thresholds it is a function
of the waiting counts; exploring for every feasible threshold vector at once follows each decision that at
least one of them makes, so the explored states hold every candidate's chain and the completion work is shared.
Rules work on arrays: one row per outcome (waiting counts after arrivals, which models are idle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def model_bits(num_models: int) -> IntArray:
    """``1 << i`` per model: a boolean row times this, summed, is the row's bitmask."""
    return np.left_shift(1, np.arange(num_models, dtype=np.int64))


@dataclass(frozen=True)
class Choices:
    """Launch decisions to follow per outcome row.

    ``holdable[o, i]``: whether idle model i's launch at outcome o depends on the threshold. Outcome o has one
    decision row per subset of its holdable models (``2 ** holdable[o].sum()`` rows, ``row`` sorted), in the
    order of the subset's bits compressed onto the holdable models, so a threshold vector's decision is found
    by arithmetic. ``launch_set`` is the bitmask of models launching (-1: no candidate makes that decision).
    """

    holdable: BoolArray
    row: IntArray
    launch_set: IntArray


class LaunchRule(Protocol):
    """The launch decisions to follow: ``waiting`` counts after arrivals and ``idle`` flags, per outcome row."""

    def choices(self, waiting: IntArray, idle: BoolArray) -> Choices: ...


@dataclass(frozen=True)
class FixedThresholds:
    """An idle model launches when its queue reaches ``min(B_i, cap_i)`` (the policy never waits for more
    requests than one step can take)."""

    thresholds: tuple[int, ...]
    caps: tuple[int, ...]

    @property
    def effective(self) -> IntArray:
        return np.minimum(np.asarray(self.thresholds, dtype=np.int64), np.asarray(self.caps, dtype=np.int64))

    def choices(self, waiting: IntArray, idle: BoolArray) -> Choices:
        ready = idle & (waiting >= self.effective)
        rows = np.arange(len(waiting), dtype=np.int64)
        return Choices(np.zeros_like(idle), rows, ready.astype(np.int64) @ model_bits(waiting.shape[1]))


@dataclass(frozen=True)
class AnyFeasible:
    """Every decision some threshold vector with ``1 <= B_i <= cap_i`` and ``sum(B_i - 1) < N`` makes.

    An idle model with ``k > 0`` waiting holds back exactly when ``B_i > k``; that needs ``k < cap_i``, and the
    models held back together need ``sum k < N`` (the smallest such vector, ``B_i = k + 1``, is feasible).
    """

    num_requests: int
    caps: tuple[int, ...]

    def choices(self, waiting: IntArray, idle: BoolArray) -> Choices:
        num_models = waiting.shape[1]
        bits = model_bits(num_models)
        ready = idle & (waiting > 0)
        holdable = ready & (waiting < np.asarray(self.caps, dtype=np.int64))
        ready_bits = ready.astype(np.int64) @ bits
        rows, sets = [], []
        for held in range(1 << num_models):
            held_mask = (held & bits) != 0
            chosen = np.flatnonzero(holdable[:, held_mask].all(axis=1))
            feasible = waiting[chosen][:, held_mask].sum(axis=1) < self.num_requests
            rows.append(chosen)
            sets.append(np.where(feasible, ready_bits[chosen] & ~held, -1))
        row = np.concatenate(rows)
        order = np.argsort(row, kind="stable")
        return Choices(holdable, row[order], np.concatenate(sets)[order])
