"""The large model's share of a routed answer: measured on a Markov router (P, C), and set to a chosen value
while keeping the rest of the routing's shape (``tokenrouter plan``'s "when not to route"; docs/planning.md).

The share is of committed tokens: a step on model ``i`` that moves the request to ``j`` commits ``C[i][j]``
tokens, so the large model's share is its stationary steps' commits over all commits. For the R2R pair
(P = [[1-a, a], [1, 0]], C = [[1, 0], [1, 0]]: the small model's token is dropped when the large one takes
over) it is exactly ``a``, the paper's "LLM ratio".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

Matrix = tuple[tuple[float, ...], ...]
#: Bisection steps on the odds factor (log scale) and on the share.
SEARCH_STEPS = 60


def stationary(P: Sequence[Sequence[float]]) -> np.ndarray:
    """Stationary distribution of the request's model (the left eigenvector of ``P`` for eigenvalue 1)."""
    a = np.asarray(P, dtype=float)
    n = len(a)
    system = np.vstack([a.T - np.eye(n), np.ones(n)])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    pi, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    pi = np.clip(pi, 0.0, None)
    return np.asarray(pi / pi.sum())


def large_share(P: Sequence[Sequence[float]], C: Sequence[Sequence[float]]) -> float:
    """Share of committed tokens written by steps on the last (largest) model."""
    pi = stationary(P)
    commits = pi[:, None] * np.asarray(P, dtype=float) * np.asarray(C, dtype=float)
    total = commits.sum()
    return float(commits[-1].sum() / total) if total > 0 else 0.0


def scaled(P: Sequence[Sequence[float]], factor: float) -> Matrix:
    """``P`` with every other model's odds of handing the request to the large one multiplied by ``factor``
    (its other moves scaled down to keep the row stochastic); the large model's own row is unchanged."""
    last = len(P) - 1
    rows = []
    for i, row in enumerate(P):
        p = row[last]
        if i == last or p >= 1.0:
            rows.append(tuple(map(float, row)))
            continue
        norm = factor * p + 1.0 - p
        rows.append(tuple(x / norm if j != last else factor * p / norm for j, x in enumerate(row)))
    return tuple(rows)


def with_large_share(P: Sequence[Sequence[float]], C: Sequence[Sequence[float]], share: float) -> Matrix:
    """The routing matrix whose large-model share is ``share`` (clamped to what scaling can reach), found by
    bisection on the odds factor of :func:`scaled`; ``share`` 0 never visits the large model."""
    if share <= 0:
        return scaled(P, 0.0)
    lo, hi = -30.0, 30.0  # log factor
    for _ in range(SEARCH_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if large_share(scaled(P, math.exp(mid)), C) < share else (lo, mid)
    return scaled(P, math.exp((lo + hi) / 2))


def break_even(routed: Callable[[float], float], alone: float, top: float = 1.0, steps: int = 10) -> float | None:
    """The share at which ``routed(share)`` (throughput falling as the share grows) falls to ``alone``, by
    bisection on [0, ``top``]; None when routing loses even at share 0, ``top`` when it still wins there."""
    if routed(0.0) <= alone:
        return None
    if routed(top) > alone:
        return top
    lo, hi = 0.0, top
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if routed(mid) > alone else (lo, mid)
    return (lo + hi) / 2
