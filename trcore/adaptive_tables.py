"""Step-time tables from a window's steps (the adaptive controller's latency inputs): a base table scaled by what
the steps measured, or, learning from nothing, a line fitted to the steps, with the flatter and the steeper line
their spread still allows (:class:`FittedTable`). A switch toward batching more must gain on those too
(:func:`trcore.adaptive_solve.solve`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Per model: batch size -> (number of steps, their total seconds, their total squared seconds).
StepTally = Mapping[int, tuple[int, float, float]]


@dataclass(frozen=True)
class FittedTable:
    """One model's step times by batch size - 1 (``latency_s``); ``scale``: measured over the base table's
    prediction (None: fitted to the steps); ``flat_s`` and ``steep_s``: the line with its slope ``sigma``
    standard errors flatter (at least flat) and steeper (at most through the origin), None with a base table;
    ``slope_error_s``: that standard error (seconds per request; inf where the steps ran at one batch size or
    too few to tell)."""

    latency_s: tuple[float, ...]
    scale: float | None
    flat_s: tuple[float, ...] | None
    steep_s: tuple[float, ...] | None
    slope_error_s: float | None


def base_at(base: Sequence[float], batch_size: int) -> float:
    """A base table's latency at ``batch_size`` (entries by batch size - 1; larger batches use the last)."""
    return base[min(batch_size, len(base)) - 1]


def merge_tallies(tallies: Sequence[StepTally]) -> dict[int, tuple[int, float, float]]:
    """Several spans' step tallies of one model summed by batch size."""
    merged: dict[int, tuple[int, float, float]] = {}
    for tally in tallies:
        for b, (n, t, tt) in tally.items():
            n0, t0, tt0 = merged.get(b, (0, 0.0, 0.0))
            merged[b] = (n0 + n, t0 + t, tt0 + tt)
    return merged


def fit_table(tally: StepTally, base: Sequence[float] | None, cap: int, sigma: float) -> FittedTable | None:
    """A model's table of ``cap`` entries: the base scaled by measured / predicted, else a line fitted to the
    steps (None: no base and no steps)."""
    steps = sum(n for n, _, _ in tally.values())
    if base is not None:
        predicted = sum(n * base_at(base, b) for b, (n, _, _) in tally.items())
        scale = sum(t for _, t, _ in tally.values()) / predicted if steps and predicted > 0 else 1.0
        return FittedTable(tuple(base_at(base, b) * scale for b in range(1, cap + 1)), scale, None, None, None)
    if not steps:
        return None
    return _fitted_line(tally, cap, sigma)


def _fitted_line(tally: StepTally, cap: int, sigma: float) -> FittedTable:
    """Weighted least squares of step time on batch size; a step never gets faster with a larger batch (nor
    faster than the quickest batch size measured). The flat and steep lines keep the fit's centre and move the
    slope by ``sigma`` standard errors, the flat one to at least zero, the steep one to at most the line through
    the origin (every request costing what it costs at the mean batch: no saving from batching at all)."""
    n = sum(c for c, _, _ in tally.values())
    mean_b = sum(b * c for b, (c, _, _) in tally.items()) / n
    mean_t = sum(t for _, t, _ in tally.values()) / n
    sxx = sum(c * (b - mean_b) ** 2 for b, (c, _, _) in tally.items())
    sxy = sum((b - mean_b) * (t - c * mean_t) for b, (c, t, _) in tally.items())
    squares = sum(tt for _, _, tt in tally.values())
    syy = squares - n * mean_t**2
    slope = max(sxy / sxx, 0.0) if sxx > 0 else 0.0
    residual = syy - 2 * slope * sxy + slope**2 * sxx
    residual = residual if residual > 1e-12 * squares else 0.0  # rounding left of an exact line
    error = math.sqrt(residual / (n - 2) / sxx) if sxx > 0 and n > 2 else math.inf
    floor = min(t / c for c, t, _ in tally.values())
    spread = sigma * error if sigma > 0 else 0.0
    steep = max(min(slope + spread, mean_t / mean_b), slope)

    def line(s: float, low: float) -> tuple[float, ...]:
        return tuple(max(mean_t + s * (b - mean_b), low) for b in range(1, cap + 1))

    # The steep line needs no floor: at most through the origin, it stays above zero at every batch size.
    return FittedTable(line(slope, floor), None, line(max(slope - spread, 0.0), floor), line(steep, 0.0), error)
