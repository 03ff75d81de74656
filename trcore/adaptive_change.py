"""Whether the traffic changed inside the adaptive controller's window.

A sliding window that spans a change mixes both regimes until it has slid past it: a controller that waits for
that reacts a whole window late, and one that decides on the mixture picks a vector for traffic that never
existed. At every decision the controller compares the window's last ``recent_s`` with the rest: when the
concurrency or some routing probability moved by more than its tolerance and by ``sigma`` standard errors of the
two estimates (the spans' spread for the concurrency; a two-proportion test on the transition counts for the
routing, so a few noisy seconds at low traffic do not count as a change), the older observations are dropped
and the controller solves on the newer ones. :func:`change_point` answers with the start of the newer part; no
clock is read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trcore.adaptive_window import Observation, Tally, concurrency_spread, tally

#: Transitions a model's row needs in each part before its routing is compared (fewer: not compared).
MIN_ROW_STEPS = 20


def concurrency_changed(before: Tally, after: Tally, tolerance: float, sigma: float) -> bool:
    """The mean active count moved by at least one request, by more than ``tolerance`` (relative), and by more
    than ``sigma`` standard errors of the two means, both taken with the older spans' spread
    (:func:`~trcore.adaptive_window.concurrency_spread`)."""
    change = abs(after.concurrency - before.concurrency)
    if change < max(1.0, tolerance * before.concurrency):
        return False
    means = before.span_concurrency
    spread = concurrency_spread(means, before.concurrency)
    return change > sigma * spread * math.sqrt(1.0 / len(means) + 1.0 / len(after.span_concurrency))


def routing_changed(before: Tally, after: Tally, tolerance: float, sigma: float) -> bool:
    """Some model's probability of going on to some model moved by more than ``tolerance`` (absolute) and by
    more than ``sigma`` standard errors (two-proportion test, pooled); rows with fewer than
    :data:`MIN_ROW_STEPS` transitions in either part are not compared."""
    for row_a, row_b in zip(before.transitions, after.transitions, strict=True):
        n_a, n_b = sum(row_a), sum(row_b)
        if min(n_a, n_b) < MIN_ROW_STEPS:
            continue
        for c_a, c_b in zip(row_a, row_b, strict=True):
            diff = abs(c_a / n_a - c_b / n_b)
            pooled = (c_a + c_b) / (n_a + n_b)
            std_error = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_a + 1.0 / n_b))
            if diff > tolerance and diff > sigma * std_error:
                return True
    return False


def change_point(
    observations: Sequence[Observation],
    recent_s: float,
    min_before_s: float,
    *,
    tolerance: float,
    concurrency_tolerance: float,
    sigma: float,
) -> float | None:
    """The start of the observations of the last ``recent_s`` seconds when their traffic differs from that of
    the ones before them, which must span at least ``min_before_s``; None when it does not, or cannot be told."""
    if recent_s <= 0 or not observations:
        return None
    cut = observations[-1].end_s - recent_s - 1e-9
    recent = [o for o in observations if o.start_s >= cut]
    older = [o for o in observations if o.start_s < cut]
    if not recent or not older:
        return None
    before, after = tally(older), tally(recent)
    if before.span_s < min_before_s - 1e-9:
        return None
    moved = concurrency_changed(before, after, concurrency_tolerance, sigma)
    if moved or routing_changed(before, after, tolerance, sigma):
        return recent[0].start_s
    return None
