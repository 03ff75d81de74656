"""The adaptive threshold controller (``batching.thresholds: adaptive``): fed windows of live observations,
asked for a decision, it re-solves the throughput model on what the window estimates and switches the
threshold vector only when the predicted gain is worth it (hysteresis).

It takes time as an argument and reads no clock, so the simulator (on its clock) and the server (on the
wall clock, off the hot path) drive the same object, and a test scripts its windows by hand. Its knobs are in
:mod:`trcore.adaptive_config`, one solve in :mod:`trcore.adaptive_solve`, the change test in
:mod:`trcore.adaptive_change`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from numbers import Integral
from typing import Any

from trcore.adaptive_change import change_point
from trcore.adaptive_config import AdaptiveConfig, Retune, has_moved
from trcore.adaptive_solve import SolveJob, in_force, sampling_precision, solve
from trcore.adaptive_window import Observation, ObservationWindow, WindowEstimate, has_traffic
from trcore.errors import ConfigError
from trcore.policy import BatchingPolicy

__all__ = [
    "AdaptiveConfig",
    "AdaptiveController",
    "Retune",
    "SolveJob",
    "has_moved",
    "in_force",
    "policy_for_vector",
    "sampling_precision",
    "solve",
]


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
        if not thresholds or any(isinstance(b, bool) or not isinstance(b, Integral) or b < 1 for b in thresholds):
            raise ConfigError("thresholds", f"need whole numbers >= 1, one per model, got {list(thresholds)}")
        self.thresholds = tuple(int(b) for b in thresholds)
        self.num_models = len(self.thresholds)
        if base_latency_s is not None and len(base_latency_s) != self.num_models:
            raise ConfigError("base_latency_s", f"needs one table per model ({self.num_models})")
        if max_batch is not None and (len(max_batch) != self.num_models or min(max_batch) < 1):
            raise ConfigError("max_batch", f"needs one cap >= 1 per model ({self.num_models}), got {list(max_batch)}")
        self.base_latency_s = base_latency_s
        self.max_batch = tuple(max_batch) if max_batch is not None else (256,) * self.num_models
        self.window = ObservationWindow(self.num_models, config.window_s)
        self.retunes: list[Retune] = []
        self.switches: list[Retune] = []
        self.last_estimate: WindowEstimate | None = None
        self._solved: Retune | None = None
        self._last_switch_s = started_s
        self.num_solves = 0
        #: When the change test dropped the window's older observations (the controller's decision times).
        self.changes: list[float] = []
        self._filled = False  # the window has been full since the start, or since it was last idle
        self._needs_fill = True  # False after a change: the newer part decides once it holds min_steps

    def observe(self, obs: Observation) -> None:
        """Add one span of observations to the window."""
        self.window.add(obs)
        if not self.window.observations:  # a window without traffic: learn again as at start-up
            self._filled, self._needs_fill = False, True

    def decide(self, now: float) -> Retune | None:
        """Solve again if the window's inputs moved since the last solve, and switch when the gain is worth it
        and the last switch is old enough. Returns the retune when one was solved or applied, else None."""
        job = self.plan(now)
        if job is None:
            return None
        return self.conclude(now, solve(job) if job.fresh else None)

    def plan(self, now: float) -> SolveJob | None:
        """The first half of :meth:`decide`: the window's estimate, and whether it needs a fresh solve
        (``fresh``). None: the window is too thin to decide, or its last span saw no traffic to tune for. A caller
        may run :func:`solve` elsewhere (another process) and hand the result to :meth:`conclude`."""
        self._drop_before_change(now)
        estimate = self._estimate()
        self.last_estimate = estimate
        if estimate is None or not has_traffic(self.window.observations[-1]):
            return None
        solved = self._solved
        fresh = solved is None or (
            (now - solved.time_s >= self.config.solve_interval_s or self._changed_since(solved.time_s))
            and has_moved(solved.inputs, estimate, self.config)
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
        if solved.worst_gain is not None and solved.worst_gain <= self._needed_gain(solved.new):
            return self._record(replace(solved, reason="below min_gain within the tables' spread")) if fresh else None
        last = self._last_switch_s
        # min_interval_s holds a vector against noise on the same traffic; after a change the traffic is new.
        if last is not None and now - last < self.config.min_interval_s and not self._changed_since(last):
            return self._record(replace(solved, reason="min_interval_s")) if fresh else None
        return self._switch(replace(solved, time_s=now, old=self.thresholds, applied=True, reason="gain"))

    def _needed_gain(self, new: tuple[int, ...]) -> float:
        """The predicted gain a switch to ``new`` needs: ``min_gain``, but back to no delay from a delaying vector
        only that the delay no longer earns half of it (its waits cost latency; the margin keeps a vector near
        the border from flapping)."""
        if max(new) == 1 < max(self.thresholds):
            return -self.config.min_gain / 2
        return self.config.min_gain

    def _drop_before_change(self, now: float) -> None:
        """Once the window has been full, drop its observations from before a change in the traffic
        (:func:`~trcore.adaptive_change.change_point`; the older part must span half the window)."""
        cfg = self.config
        if cfg.change_s <= 0 or not self._filled:
            return
        at = change_point(
            self.window.observations,
            cfg.change_s,
            cfg.window_s / 2,
            tolerance=cfg.tolerance,
            concurrency_tolerance=cfg.concurrency_tolerance,
            sigma=cfg.change_sigma,
        )
        if at is not None:
            self.window.drop_before(at)
            self.changes.append(now)
            self._needs_fill = False

    @property
    def predicted_tok_s(self) -> float | None:
        """The throughput model's tok/s of the vector in force on the last solve's inputs (None before any)."""
        return self._solved.current_tok_s if self._solved is not None else None

    def _changed_since(self, time_s: float) -> bool:
        return bool(self.changes) and self.changes[-1] > time_s

    def _estimate(self) -> WindowEstimate | None:
        cfg, caps = self.config, self.max_batch
        estimate = self.window.estimate(caps, self.base_latency_s, cfg.gain_sigma)
        if estimate is None or estimate.routing.num_steps < cfg.min_steps:
            return None
        # Until the window has been full once (since the start, or since a window without traffic) it must fill;
        # after a change the newer part decides as soon as it holds min_steps (the test told it from the older part).
        fill = cfg.min_fill * cfg.window_s if self._needs_fill else 0.0
        if estimate.span_s < fill - 1e-9:
            return None
        self._filled = self._filled or estimate.span_s >= cfg.min_fill * cfg.window_s - 1e-9
        n = estimate.concurrency

        def cut(rows: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, ...], ...]:
            return tuple(row[: min(cap, n)] for row, cap in zip(rows, caps, strict=True))

        flat, steep = (None if t is None else cut(t) for t in (estimate.flat_s, estimate.steep_s))
        return replace(estimate, latency_s=cut(estimate.latency_s), flat_s=flat, steep_s=steep)

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
            "num_changes": len(self.changes),
            "last_change_s": self.changes[-1] if self.changes else None,
            "num_solves": self.num_solves,
        }


def policy_for_vector(policy: BatchingPolicy, vector: Sequence[int], model: int) -> BatchingPolicy:
    """Model ``model``'s policy under a new threshold vector: its entry, its peers' slack (so the vector stays
    deadlock-free as requests finish), no table; max wait and max batch kept. Every driver switches this way."""
    b = int(vector[model])
    return replace(policy, threshold=b, table={}, peer_slack=sum(x - 1 for x in vector) - (b - 1))
