"""The adaptive threshold controller (``batching.thresholds: adaptive``): fed windows of live observations,
asked for a decision, it re-solves the throughput model on what the window estimates and switches the
threshold vector only when the predicted gain is worth it (hysteresis).

It takes time as an argument and reads no clock, so the simulator (on its clock) and the server (on the
wall clock, off the hot path) drive the same object, and a test scripts its windows by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

from trcore.adaptive_window import Observation, ObservationWindow, WindowEstimate, latency_moved
from trcore.errors import ConfigError
from trcore.policy import BatchingPolicy, policies_for


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
      one request); ``latency_tolerance`` for the step times, compared at the batch sizes the window ran and
      with a change common to every model divided out (scaling every table by one factor leaves the best
      vector as it was, and measured step times wobble by a few percent from window to window);
    * ``solve_interval_s``: at least this long between two solves (a window sliding over a change moves on
      every tick; this bounds the solver's work);
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
    method: str = "auto"
    max_candidates: int = 256
    quantum_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "window_s": self.window_s > 0,
            "min_gain": 0 <= self.min_gain < 1,
            "min_interval_s": self.min_interval_s >= 0,
            "min_steps": self.min_steps >= 1,
            "min_fill": 0 <= self.min_fill <= 1,
            "tolerance": self.tolerance >= 0,
            "concurrency_tolerance": self.concurrency_tolerance >= 0,
            "latency_tolerance": self.latency_tolerance >= 0,
            "max_candidates": self.max_candidates >= 1,
            "quantum_fraction": 0 < self.quantum_fraction <= 1,
            "solve_interval_s": self.solve_interval_s >= 0,
            "method": self.method in ("auto", "sampled", "exact"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(f"adaptive.{name}", f"out of range: {getattr(self, name)!r}")


@dataclass(frozen=True)
class Retune:
    """One solve and what came of it: at ``time_s`` the vector in force was ``old`` (predicted
    ``current_tok_s`` on the window's inputs), the best found ``new`` (``predicted_tok_s``) among
    ``num_candidates`` vectors solved; ``applied`` says whether the controller switched, ``reason`` why or why
    not."""

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
            "inputs": self.inputs.to_dict(),
        }


class AdaptiveController:
    """Chooses the threshold vector in force from a sliding window of observations.

    ``thresholds``: the vector in force at the start; ``base_latency_s``: per model a step-time table by
    batch size - 1 that measured steps scale (None: tables are fitted to the measured steps alone, learning
    from nothing); ``max_batch``: per-model caps; ``started_s``: when ``thresholds`` came into force (counts
    as a switch for ``min_interval_s``; None: the first switch may come at once). :meth:`observe` adds a span,
    :meth:`decide` answers; ``num_solves`` counts the optimizer's runs.
    """

    def __init__(
        self,
        config: AdaptiveConfig,
        thresholds: Sequence[int],
        *,
        base_latency_s: Sequence[Sequence[float]] | None = None,
        max_batch: Sequence[int] | None = None,
        started_s: float | None = None,
    ) -> None:
        self.config = config
        self.thresholds = tuple(int(b) for b in thresholds)
        self.num_models = len(self.thresholds)
        if base_latency_s is not None and len(base_latency_s) != self.num_models:
            raise ConfigError("base_latency_s", f"needs one table per model ({self.num_models})")
        self.base_latency_s = base_latency_s
        self.max_batch = tuple(max_batch) if max_batch is not None else (256,) * self.num_models
        self.window = ObservationWindow(self.num_models, config.window_s)
        self.retunes: list[Retune] = []
        self.switches: list[Retune] = []
        self.last_estimate: WindowEstimate | None = None
        self._solved: Retune | None = None
        self._last_switch_s = started_s
        self.num_solves = 0

    def observe(self, obs: Observation) -> None:
        """Add one span of observations to the window."""
        self.window.add(obs)

    def decide(self, now: float) -> Retune | None:
        """Solve again if the window's inputs moved since the last solve, and switch when the gain is worth it
        and the last switch is old enough. Returns the retune when one was solved or applied, else None."""
        job = self.plan(now)
        if job is None:
            return None
        return self.conclude(now, solve(job) if job.fresh else None)

    def plan(self, now: float) -> SolveJob | None:
        """The first half of :meth:`decide`: the window's estimate, and whether it needs a fresh solve
        (``fresh``). None: the window is too thin to decide. A caller may run :func:`solve` elsewhere (another
        process) and hand the result to :meth:`conclude`."""
        estimate = self._estimate()
        self.last_estimate = estimate
        if estimate is None:
            return None
        solved = self._solved
        fresh = solved is None or (
            now - solved.time_s >= self.config.solve_interval_s and has_moved(solved.inputs, estimate, self.config)
        )
        return SolveJob(self.config, self.thresholds, self.max_batch, estimate, now, fresh)

    def conclude(self, now: float, fresh: Retune | None) -> Retune | None:
        """The second half of :meth:`decide`: switch on ``fresh`` (a solve of :meth:`plan`'s job) or, without one,
        on the last solve, when the gain is worth it and the last switch is old enough."""
        if fresh is not None:
            self.num_solves += 1
        solved = fresh if fresh is not None else self._solved
        if solved is None:
            return None
        if solved.new == self.thresholds:
            return self._record(replace(solved, reason="in force")) if fresh else None
        if solved.predicted_gain <= self._needed_gain(solved.new):
            return self._record(replace(solved, reason="below min_gain")) if fresh else None
        last = self._last_switch_s
        if last is not None and now - last < self.config.min_interval_s:
            return self._record(replace(solved, reason="min_interval_s")) if fresh else None
        return self._switch(replace(solved, time_s=now, old=self.thresholds, applied=True, reason="gain"))

    def _needed_gain(self, new: tuple[int, ...]) -> float:
        """The predicted gain a switch to ``new`` needs: ``min_gain``, but back to no delay from a delaying vector
        only that the delay no longer earns half of it (its waits cost latency; the margin keeps a vector near
        the border from flapping)."""
        if max(new) == 1 < max(self.thresholds):
            return -self.config.min_gain / 2
        return self.config.min_gain

    def _estimate(self) -> WindowEstimate | None:
        caps = self.max_batch
        estimate = self.window.estimate(caps, self.base_latency_s)
        if estimate is None or estimate.routing.num_steps < self.config.min_steps:
            return None
        if estimate.span_s < self.config.min_fill * self.config.window_s - 1e-9:
            return None
        n = estimate.concurrency
        tables = tuple(row[: min(cap, n)] for row, cap in zip(estimate.latency_s, caps, strict=True))
        return replace(estimate, latency_s=tables)

    def _record(self, retune: Retune) -> Retune:
        self._solved = retune
        self.retunes.append(retune)
        return retune

    def _switch(self, retune: Retune) -> Retune:
        self.thresholds = retune.new
        self._last_switch_s = retune.time_s
        self.switches.append(retune)
        self.retunes.append(retune)
        # The switched-to vector is now the one in force: its predicted throughput is the current one.
        self._solved = replace(retune, current_tok_s=retune.predicted_tok_s)
        return retune

    def state(self) -> dict[str, Any]:
        """The controller's window and last decision, JSON-ready (for ``/debug/state``)."""
        last = self.retunes[-1] if self.retunes else None
        return {
            "thresholds": list(self.thresholds),
            "window_s": self.config.window_s,
            "num_observations": len(self.window.observations),
            "span_s": self.window.span_s,
            "estimate": self.last_estimate.to_dict() if self.last_estimate else None,
            "last_retune": last.to_dict() if last else None,
            "num_switches": len(self.switches),
            "num_solves": self.num_solves,
        }


@dataclass(frozen=True)
class SolveJob:
    """What one solve needs (picklable, so it can run in another process): the knobs, the vector in force and
    the caps, the window's inputs, the time it was planned, and whether the inputs moved enough to solve."""

    config: AdaptiveConfig
    thresholds: tuple[int, ...]
    max_batch: tuple[int, ...]
    inputs: WindowEstimate
    time_s: float
    fresh: bool


def solve(job: SolveJob) -> Retune:
    """Optimize on the job's inputs (over the grid past ``max_candidates`` vectors), and solve the vector in
    force (as clamped at that concurrency)."""
    # numpy and scipy: only when solving
    from trcore.throughput import SamplingConfig, ThroughputModel, feasible_thresholds, optimize_on_grid

    cfg, inputs, n = job.config, job.inputs, job.inputs.concurrency
    quantum = min(min(row) for row in inputs.latency_s) * cfg.quantum_fraction
    model = ThroughputModel(
        inputs.P,
        inputs.routing.C,
        [list(row) for row in inputs.latency_s],
        quantum_s=quantum,
        max_batch=list(job.max_batch),
        sampling=SamplingConfig(seed=cfg.seed, rel_std_error=sampling_precision(cfg.min_gain)),
    )
    current = in_force(job.thresholds, n)
    many = next(islice(feasible_thresholds(model.spec.batch_caps(n), n), cfg.max_candidates, None), None)
    if many is not None:
        best = optimize_on_grid(model, n, keep=[current], min_gain=cfg.min_gain, method=cfg.method)
    else:
        best = model.optimize(n, min_gain=cfg.min_gain, method=cfg.method)
    if current == best.thresholds:
        current_tok_s = best.throughput_tok_s
    else:
        current_tok_s = model.solve(n, current, method=cfg.method).throughput_tok_s
    found, tok_s = best.thresholds, best.throughput_tok_s
    solved = len(best.candidates)
    return Retune(job.time_s, job.thresholds, found, tok_s, current_tok_s, False, "", best.method, inputs, solved)


def sampling_precision(min_gain: float) -> float:
    """The sampled method's relative standard error for a controller: a quarter of ``min_gain`` tells a gain worth
    switching for (at least the optimizer's 0.15%, at most 0.5%: a tighter race costs CPU it does not need)."""
    return min(max(min_gain / 4, 0.0015), 0.005)


def policy_for_vector(policy: BatchingPolicy, vector: Sequence[int], model: int) -> BatchingPolicy:
    """Model ``model``'s policy under a new threshold vector: its entry, its peers' slack (so the vector stays
    deadlock-free as requests finish), no table; max wait and max batch kept. Every driver switches this way."""
    b = int(vector[model])
    return replace(policy, threshold=b, table={}, peer_slack=sum(x - 1 for x in vector) - (b - 1))


def in_force(thresholds: Sequence[int], num_active: int) -> tuple[int, ...]:
    """The thresholds the policies apply at ``num_active`` active requests (clamped to stay feasible)."""
    return tuple(p.threshold_for(num_active) for p in policies_for(thresholds))


def has_moved(before: WindowEstimate, after: WindowEstimate, config: AdaptiveConfig) -> bool:
    """Whether the window's inputs moved enough since ``before`` to solve again."""
    n0, n1 = before.concurrency, after.concurrency
    if n1 != n0 and abs(n1 - n0) >= max(1.0, config.concurrency_tolerance * n0):
        return True
    tol = config.tolerance
    pairs = ((before.P, after.P), (before.routing.C, after.routing.C))
    if any(
        abs(x - y) > tol for a, b in pairs for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)
    ):
        return True
    return latency_moved(before, after, config.latency_tolerance)
