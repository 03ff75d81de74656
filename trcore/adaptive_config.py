"""The adaptive controller's knobs (:class:`AdaptiveConfig`), the record of one solve (:class:`Retune`), and
whether a window's inputs moved enough since the last solve to solve again (:func:`has_moved`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from trcore.adaptive_window import WindowEstimate, latency_moved
from trcore.errors import ConfigError


@dataclass(frozen=True)
class AdaptiveConfig:
    """The controller's knobs.

    * ``window_s``: observations older than this are forgotten;
    * ``min_gain``: a new vector must be predicted to beat the one in force by more than this fraction (and
      a vector that delays batches must beat B = 1 by as much, as in ``optimize``); a delaying vector in force
      that no longer beats B = 1 by half of it goes back to B = 1;
    * ``min_interval_s``: at least this long between two switches;
    * ``min_steps``: request-steps the window must hold before a decision; ``min_fill``: the fraction of
      ``window_s`` it must span (a half-filled window at start-up decides on a few noisy seconds);
    * ``tolerance``: P and C entries that moved less than this since the last solve (absolute) reuse that
      solve instead of re-solving; ``concurrency_tolerance`` the same for the concurrency (relative, at least
      one request, and more than :data:`SOLVE_SIGMA` standard errors of the two windows' means, so a closed
      loop's second-to-second swing does not re-solve every interval); ``latency_tolerance`` for the step
      times, compared at the batch sizes the window ran and with a change common to every model divided out
      (scaling every table by one factor leaves the best vector as it was, and measured step times wobble by
      a few percent from window to window);
    * ``solve_interval_s``: at least this long between two solves (a window sliding over a change moves on
      every tick; this bounds the solver's work);
    * ``change_window_s``: the window's last this many seconds are compared with the rest at every decision
      (None: a quarter of ``window_s``; 0: never); when their routing or concurrency differ by more than the
      tolerances and by ``change_sigma`` standard errors, the traffic changed: the older observations are dropped,
      and the controller solves on the newer ones at once (:mod:`trcore.adaptive_change`) instead of waiting for
      a window that still mixes both; a change after the last switch also lifts ``min_interval_s``;
    * ``gain_sigma``: learning from nothing, each model's step-time line is fitted to the window's steps; a
      switch to a vector that batches more on some model must also gain more than ``min_gain`` with each
      model's slope this many standard errors flatter or steeper (every combination; the slope kept between
      flat and the line through the origin): on steps as noisy as a shared CPU's a 2% gain can be inside what
      the window can tell (0: off; models with base tables keep them);
    * ``method``: the optimizer's (``auto``: exact while cheap, else sampled; ``sampled``); ``max_candidates``:
      where more vectors are feasible, :func:`~trcore.throughput.optimize_on_grid` solves a grid (and the
      vector in force), then the box around its best, at a fraction of the CPU;
      ``quantum_fraction``: its time quantum as a fraction of the shortest step; ``seed``: its draws.
    """

    window_s: float = 10.0
    min_gain: float = 0.02
    min_interval_s: float = 10.0
    min_steps: int = 200
    min_fill: float = 1.0
    tolerance: float = 0.02
    concurrency_tolerance: float = 0.1
    latency_tolerance: float = 0.05
    solve_interval_s: float = 5.0
    change_window_s: float | None = None
    change_sigma: float = 4.0
    gain_sigma: float = 2.0
    method: str = "auto"
    max_candidates: int = 256
    quantum_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {  # name: (in range, the range)
            "window_s": (self.window_s > 0, "> 0"),
            "min_gain": (0 <= self.min_gain < 1, "in [0, 1)"),
            "min_interval_s": (self.min_interval_s >= 0, ">= 0"),
            "min_steps": (self.min_steps >= 1, ">= 1"),
            "min_fill": (0 <= self.min_fill <= 1, "in [0, 1]"),
            "tolerance": (self.tolerance >= 0, ">= 0"),
            "concurrency_tolerance": (self.concurrency_tolerance >= 0, ">= 0"),
            "latency_tolerance": (self.latency_tolerance >= 0, ">= 0"),
            "max_candidates": (self.max_candidates >= 1, ">= 1"),
            "quantum_fraction": (0 < self.quantum_fraction <= 1, "in (0, 1]"),
            "solve_interval_s": (self.solve_interval_s >= 0, ">= 0"),
            "change_window_s": (
                self.change_window_s is None or 0 <= self.change_window_s < self.window_s,
                f">= 0 and below window_s ({self.window_s})",
            ),
            "change_sigma": (self.change_sigma > 0, "> 0"),
            "gain_sigma": (self.gain_sigma >= 0, ">= 0"),
            "method": (self.method in ("auto", "sampled", "exact"), "one of auto, sampled, exact"),
        }
        for name in ("min_steps", "max_candidates", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
                raise ConfigError(f"adaptive.{name}", f"must be a whole number >= 0, got {value!r}")
        for name, (ok, bounds) in checks.items():
            value = getattr(self, name)
            finite = not isinstance(value, float) or math.isfinite(value)
            if not ok or not finite:
                raise ConfigError(f"adaptive.{name}", f"must be finite and {bounds}, got {value!r}")

    @property
    def change_s(self) -> float:
        """The recent span the change test compares with the rest of the window (0: no test)."""
        return self.window_s / 4 if self.change_window_s is None else self.change_window_s


@dataclass(frozen=True)
class Retune:
    """One solve and what came of it: at ``time_s`` the vector in force was ``old`` (predicted
    ``current_tok_s`` on the window's inputs), the best found ``new`` (``predicted_tok_s``) among
    ``num_candidates`` vectors solved; ``applied`` says whether the controller switched, ``reason`` why or why
    not; ``worst_gain``: the least gain of ``new`` over ``old`` with the window's slopes moved within their
    spread (None: not solved, as when ``new`` batches no more than ``old``, gains no more than ``min_gain`` on the
    fitted tables already, or no table was fitted)."""

    time_s: float
    old: tuple[int, ...]
    new: tuple[int, ...]
    predicted_tok_s: float
    current_tok_s: float
    applied: bool
    reason: str
    method: str
    inputs: WindowEstimate
    num_candidates: int = 0
    worst_gain: float | None = None

    @property
    def predicted_gain(self) -> float:
        return self.predicted_tok_s / self.current_tok_s - 1.0 if self.current_tok_s > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "old": list(self.old),
            "new": list(self.new),
            "predicted_gain": self.predicted_gain,
            "predicted_tok_s": self.predicted_tok_s,
            "current_tok_s": self.current_tok_s,
            "applied": self.applied,
            "reason": self.reason,
            "method": self.method,
            "num_candidates": self.num_candidates,
            "worst_gain": self.worst_gain,
            "inputs": self.inputs.to_dict(),
        }


def has_moved(before: WindowEstimate, after: WindowEstimate, config: AdaptiveConfig) -> bool:
    """Whether the window's inputs moved enough since ``before`` to solve again."""
    if concurrency_moved(before, after, config.concurrency_tolerance):
        return True
    tol = config.tolerance
    pairs = ((before.P, after.P), (before.routing.C, after.routing.C))
    if any(
        abs(x - y) > tol for a, b in pairs for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)
    ):
        return True
    return latency_moved(before, after, config.latency_tolerance)


#: Standard errors the window's mean concurrency must move by to solve again (a re-solve is cheap next to a
#: switch, so this is below the change test's ``change_sigma``).
SOLVE_SIGMA = 2.0


def concurrency_moved(before: WindowEstimate, after: WindowEstimate, tolerance: float) -> bool:
    """The concurrency moved by at least one request, by ``tolerance`` (relative) and by more than
    :data:`SOLVE_SIGMA` standard errors of the two windows' means. The earlier window's error counts at most as
    much as the later one's: spans that spread more than the traffic now were mixing two regimes (a window over
    the start-up ramp, half idle), and that spread must not hide the move from it."""
    n0, n1 = before.concurrency, after.concurrency
    if abs(n1 - n0) < max(1.0, tolerance * n0):
        return False
    e1 = after.concurrency_error
    return abs(n1 - n0) > SOLVE_SIGMA * math.hypot(min(before.concurrency_error, e1), e1)
