"""The adaptive controller's window on live traffic: observations tallied per span (routing decisions, step
times by batch size, the active count) and what a sliding window of them estimates (P, C, concurrency, one
step-time table per model).

Drivers feed an :class:`ObservationBuilder` from their own events (the simulator from its steps, the server
from step reports) and hand each span's :class:`Observation` to the controller; no clock is read here.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trcore.adaptive_tables import StepTally, fit_table, merge_tallies
from trcore.errors import ConfigError
from trcore.routing_stats import RoutingStats, stats_from_counts


@dataclass(frozen=True)
class Observation:
    """What happened from ``start_s`` to ``end_s``: ``transitions[i][j]`` request-steps on model ``i`` that
    went on to ``j`` (a finished request counts as going to the entry model, which a closed loop refills),
    ``kept[i][j]`` of them committed their token; ``active_s`` the integral of the active count over the span
    (requests x seconds); ``steps`` per model the steps by batch size (count, seconds, squared seconds)."""

    start_s: float
    end_s: float
    transitions: tuple[tuple[int, ...], ...]
    kept: tuple[tuple[int, ...], ...]
    active_s: float
    steps: tuple[StepTally, ...]


@dataclass(frozen=True)
class Tally:
    """Observations summed: per model the transitions to each model, the active-request seconds, the span, and
    each observation's own mean active count."""

    transitions: tuple[tuple[int, ...], ...]
    active_s: float
    span_s: float
    span_concurrency: tuple[float, ...]

    @property
    def concurrency(self) -> float:
        """The time-weighted mean active count."""
        return self.active_s / self.span_s if self.span_s > 0 else 0.0


def tally(observations: Sequence[Observation]) -> Tally:
    """The observations' counts summed, over the span from the first's start to the last's end."""
    m = len(observations[0].transitions)
    transitions = tuple(tuple(sum(o.transitions[i][j] for o in observations) for j in range(m)) for i in range(m))
    span = observations[-1].end_s - observations[0].start_s
    means = tuple(span_concurrency(o) for o in observations)
    return Tally(transitions, sum(o.active_s for o in observations), span, means)


class ObservationBuilder:
    """Tallies one span of observations; :meth:`flush` closes it and starts the next."""

    def __init__(self, num_models: int, start_s: float, num_active: float = 0) -> None:
        self.num_models = num_models
        self._active = num_active
        self._reset(start_s)

    def _reset(self, start_s: float) -> None:
        m = self.num_models
        self._start = self._since = start_s
        self._active_s = 0.0
        self._transitions = [[0] * m for _ in range(m)]
        self._kept = [[0] * m for _ in range(m)]
        self._steps: list[dict[int, list[float]]] = [{} for _ in range(m)]

    def record_step(self, model: int, batch_size: int, step_s: float) -> None:
        """Model ``model`` ran a step of ``batch_size`` requests that took ``step_s`` seconds."""
        tally = self._steps[model].setdefault(batch_size, [0, 0.0, 0.0])
        tally[0] += 1
        tally[1] += step_s
        tally[2] += step_s * step_s

    def record_route(self, model: int, destination: int, kept: bool) -> None:
        """After a step on ``model`` a request went on to ``destination`` (its token kept or not)."""
        self._transitions[model][destination] += 1
        self._kept[model][destination] += kept

    def set_active(self, num_active: float, now: float) -> None:
        """The active count became ``num_active`` at ``now`` (a pipeline's share of it with replicas)."""
        self._active_s += self._active * max(now - self._since, 0.0)
        self._active, self._since = num_active, now

    def flush(self, now: float) -> Observation:
        """The span up to ``now``, as one observation."""
        self.set_active(self._active, now)
        obs = Observation(
            self._start,
            now,
            tuple(tuple(row) for row in self._transitions),
            tuple(tuple(row) for row in self._kept),
            self._active_s,
            tuple({b: (int(n), t, tt) for b, (n, t, tt) in steps.items()} for steps in self._steps),
        )
        self._reset(now)
        return obs


@dataclass(frozen=True)
class WindowEstimate:
    """What the window says: routing (``routing.P``, ``routing.C``; ``P`` is ``routing.P`` with an unvisited
    model's row sent to model 0), the concurrency seen (time-weighted mean active count, rounded), per model a
    step-time table by batch size - 1 and its scale against the base latency (None without one: the table is
    then fitted to the measured steps), its steps and their mean batch size (0 without steps), and the window's
    span; the fitted tables' flatter and steeper twins (``flat_s``, ``steep_s``: a model with a base table
    repeats its table there; None where no table was fitted) and their slopes' standard errors
    (:class:`~trcore.adaptive_tables.FittedTable`)."""

    routing: RoutingStats
    P: tuple[tuple[float, ...], ...]
    concurrency: int
    latency_s: tuple[tuple[float, ...], ...]
    scale: tuple[float | None, ...]
    num_steps: tuple[int, ...]
    span_s: float
    mean_batch: tuple[float, ...]
    #: The standard error of ``concurrency`` (:func:`concurrency_spread` of the spans over their count's root).
    concurrency_error: float = 0.0
    flat_s: tuple[tuple[float, ...], ...] | None = None
    steep_s: tuple[tuple[float, ...], ...] | None = None
    slope_error_s: tuple[float | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (tables cut to the batch sizes up to the concurrency)."""
        return {
            "P": [list(row) for row in self.P],
            "C": [list(row) for row in self.routing.C],
            "concurrency": self.concurrency,
            "scale": list(self.scale),
            "latency_ms": [[round(x * 1000, 4) for x in row[: self.concurrency]] for row in self.latency_s],
            "num_steps": list(self.num_steps),
            "mean_batch": list(self.mean_batch),
            "num_request_steps": self.routing.num_steps,
            "span_s": self.span_s,
            "concurrency_error": round(self.concurrency_error, 3),
            "slope_error_ms": [None if e is None else round(e * 1000, 4) for e in self.slope_error_s],
        }


#: The most spans a window should hold: each decision re-reads them all, so its cost grows like the window's
#: length over the time between decisions, squared (drivers bound that time below by window_s / this).
MAX_WINDOW_SPANS = 1000
#: The longest time between decisions, in seconds (the simulator's clock spans at most this; a longer tick never
#: decides): drivers refuse a ``tick_s`` past it.
MAX_TICK_S = 1e9


class ObservationWindow:
    """The observations that overlap the last ``window_s`` seconds (none once those saw no request-step)."""

    def __init__(self, num_models: int, window_s: float) -> None:
        if not window_s > 0:
            raise ConfigError("window_s", f"must be > 0, got {window_s}")
        self.num_models, self.window_s = num_models, window_s
        self.observations: deque[Observation] = deque()

    def add(self, obs: Observation) -> None:
        self.observations.append(obs)
        # Keep every span that overlaps the last window_s seconds (the newest always).
        while len(self.observations) > 1 and self.observations[0].end_s <= obs.end_s - self.window_s + 1e-9:
            self.observations.popleft()
        if not any(map(has_traffic, self.observations)):
            # window_s without a request-step: the traffic that comes next starts a window of its own, as at
            # start-up (idle spans would count as filling the window and pull its concurrency towards 0)
            self.observations.clear()

    def drop_before(self, start_s: float) -> None:
        """Forget the observations that started before ``start_s`` (the newest is always kept)."""
        while len(self.observations) > 1 and self.observations[0].start_s < start_s - 1e-9:
            self.observations.popleft()

    @property
    def span_s(self) -> float:
        obs = self.observations
        return obs[-1].end_s - obs[0].start_s if obs else 0.0

    def estimate(
        self, caps: Sequence[int], base_latency_s: Sequence[Sequence[float]] | None, sigma: float = 0.0
    ) -> WindowEstimate | None:
        """The window's estimates, tables of ``caps[i]`` entries (fitted ones with flatter and steeper twins
        ``sigma`` standard errors off); None while some model has no step to learn its step time from and no base
        latency to fall back on, or the window saw no time pass."""
        m, span = self.num_models, self.span_s
        if span <= 0:
            return None
        total = tally(self.observations)
        kept = [[sum(o.kept[i][j] for o in self.observations) for j in range(m)] for i in range(m)]
        routing = stats_from_counts(total.transitions, kept)
        tallies = [merge_tallies([o.steps[i] for o in self.observations]) for i in range(m)]
        fits = []
        for i in range(m):
            base = base_latency_s[i] if base_latency_s is not None else None
            fitted = fit_table(tallies[i], base, caps[i], sigma)
            if fitted is None:
                return None
            fits.append(fitted)
        concurrency = max(1, round(total.concurrency))
        means = total.span_concurrency
        error = concurrency_spread(means, total.concurrency) / math.sqrt(len(means))
        num_steps = tuple(sum(n for n, _, _ in t.values()) for t in tallies)
        mean_batch = tuple(
            sum(b * n for b, (n, _, _) in t.items()) / max(k, 1) for t, k in zip(tallies, num_steps, strict=True)
        )
        P = tuple(row if i not in routing.unvisited else _to_entry(m) for i, row in enumerate(routing.P))
        learnt = any(f.steep_s is not None for f in fits)
        flat = tuple(f.flat_s or f.latency_s for f in fits) if learnt else None
        steep = tuple(f.steep_s or f.latency_s for f in fits) if learnt else None
        return WindowEstimate(
            routing, P, concurrency, tuple(f.latency_s for f in fits), tuple(f.scale for f in fits), num_steps,
            span, mean_batch, error, flat, steep, tuple(f.slope_error_s for f in fits),
        )  # fmt: skip


def has_traffic(obs: Observation) -> bool:
    """Whether some request took a step in the span."""
    return any(any(row) for row in obs.transitions)


def span_concurrency(obs: Observation) -> float:
    """One span's time-weighted mean active count."""
    span = obs.end_s - obs.start_s
    return obs.active_s / span if span > 0 else 0.0


def concurrency_spread(span_means: Sequence[float], mean: float) -> float:
    """How far one span's mean active count strays from ``mean``: the spans' sample deviation, but at least the
    square root of the mean. A closed loop's active count swings by about that from second to second as
    requests end and the next ones arrive (on the stack at N = 64, between 42 and 63 in 1 s spans)."""
    deviation = statistics.stdev(span_means) if len(span_means) > 1 else 0.0
    return max(deviation, math.sqrt(max(mean, 0.0)))


def _to_entry(m: int) -> tuple[float, ...]:
    # A model nobody visited gets a row back to model 0 rather than a self-loop: a transient state, so the
    # chain keeps one closed class.
    return tuple(1.0 if j == 0 else 0.0 for j in range(m))


def latency_moved(before: WindowEstimate, after: WindowEstimate, tolerance: float) -> bool:
    """Whether the models' step times, each at the mean batch it ran in ``after``'s window, changed apart by
    more than ``tolerance`` (one model's change over another's; a change common to all leaves the best vector
    as it was)."""
    changes = []
    for old, new, mean in zip(before.latency_s, after.latency_s, after.mean_batch, strict=True):
        at = min(max(round(mean), 1), len(old), len(new)) - 1
        changes.append(new[at] / old[at])
    return max(changes) / min(changes) - 1.0 > tolerance
