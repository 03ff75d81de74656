"""What a cross-validation run covers: routers, loads (closed-loop concurrencies N, open-loop Poisson rates),
threshold vectors per load, the workload and the window lengths (pure: no engine, no clock)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trcore.errors import ConfigError
from trcore.policy import is_feasible
from trserve.server.defaults import LOCAL_PAIR_RSTITCH

#: The stationary router: R2R-like (the small model hands a quarter of its steps to the large one, which
#: regenerates that token and hands straight back), so the throughput model's assumptions hold exactly.
MARKOV_P = ((0.75, 0.25), (1.0, 0.0))
MARKOV_C = ((1.0, 0.0), (1.0, 0.0))
#: Above this concurrency only a grid of threshold vectors is run (all of them below or at it).
FULL_GRID_MAX_N = 4
#: Per-model threshold values on the grid for larger N (each vector also must be feasible).
GRID_VALUES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Rate:
    """An open-loop cell's load: Poisson arrivals at ``rps`` requests/s (a closed-loop cell's load is its N)."""

    rps: float

    @property
    def tag(self) -> str:
        return f"rate{self.rps:g}"

    def __str__(self) -> str:
        return f"{self.rps:g} req/s"


#: A cell's load: N closed-loop sessions, or a Poisson arrival rate.
Load = int | Rate


def load_fields(load: Load) -> dict[str, Any]:
    """What a result cell records of its load: ``concurrency`` (None for a rate) and, for a rate, ``rate_rps``."""
    return {"concurrency": None, "rate_rps": load.rps} if isinstance(load, Rate) else {"concurrency": load}


def cell_load(cell: Mapping[str, Any]) -> Load:
    """The load of a result cell (:func:`load_fields`)."""
    rate = cell.get("rate_rps")
    return Rate(rate) if rate is not None else int(cell["concurrency"])


def load_tag(load: Load) -> str:
    """The load in a cell's request ids: ``n4`` or ``rate20``."""
    return load.tag if isinstance(load, Rate) else f"n{load}"


@dataclass(frozen=True)
class RouterChoice:
    """A router of the run: its display name, registered program and parameters."""

    name: str
    program: str
    params: dict[str, Any] = field(default_factory=dict)


def default_routers(seed: int = 0) -> tuple[RouterChoice, ...]:
    """The stationary Markov router and R-Stitch entropy switching with the local pair's thresholds (real,
    correlated routing; see ``trserve.server.defaults.LOCAL_PAIR_RSTITCH``)."""

    markov = {"P": [list(r) for r in MARKOV_P], "C": [list(r) for r in MARKOV_C], "seed": seed}
    return (RouterChoice("markov", "markov", markov), RouterChoice("rstitch", "rstitch", dict(LOCAL_PAIR_RSTITCH)))


def threshold_vectors(
    num_models: int, concurrency: int, full_grid_max_n: int = FULL_GRID_MAX_N
) -> list[tuple[int, ...]]:
    """Every feasible vector (sum(B_i - 1) < N, B_i <= N) for N <= ``full_grid_max_n``; above it the feasible
    vectors whose entries are all in :data:`GRID_VALUES`. Lexicographic order."""
    values = range(1, concurrency + 1)
    if concurrency > full_grid_max_n:
        values = [v for v in GRID_VALUES if v <= concurrency]
    vectors: list[tuple[int, ...]] = [()]
    for _ in range(num_models):
        vectors = [(*v, b) for v in vectors for b in values]
    return [v for v in vectors if is_feasible(v, concurrency)]


@dataclass(frozen=True)
class CrossvalPlan:
    """The cells: every router x load x threshold vector, each run for ``warmup_s`` + ``measure_s``, ``repeats``
    times (cells interleaved, so slow drift spreads over all). Loads: each closed-loop N of ``concurrencies``
    (vectors ``thresholds[N]``), then each open-loop rate of ``rates`` (vectors ``rate_thresholds``; arrivals of
    repeat k drawn with seed ``arrival_seed + k``)."""

    routers: tuple[RouterChoice, ...]
    concurrencies: tuple[int, ...]
    thresholds: dict[int, list[tuple[int, ...]]]
    max_tokens: int = 96
    warmup_s: float = 3.0
    measure_s: float = 12.0
    repeats: int = 1
    full_grid_max_n: int = FULL_GRID_MAX_N
    rates: tuple[float, ...] = ()
    rate_thresholds: tuple[tuple[int, ...], ...] = ()
    arrival_seed: int = 0

    @property
    def loads(self) -> tuple[Load, ...]:
        """Every load in run order: the concurrencies, then the rates."""
        return (*self.concurrencies, *(Rate(r) for r in self.rates))

    def vectors(self, load: Load) -> list[tuple[int, ...]]:
        """The threshold vectors run at ``load``."""
        return list(self.rate_thresholds) if isinstance(load, Rate) else self.thresholds[load]

    @property
    def num_cells(self) -> int:
        return len(self.routers) * sum(len(self.vectors(load)) for load in self.loads) * self.repeats

    @property
    def run_seconds(self) -> float:
        """Wall time of the measured cells alone (engine start-up and predictions come on top)."""
        return self.num_cells * (self.warmup_s + self.measure_s)

    def cells(self) -> list[tuple[int, RouterChoice, Load, tuple[int, ...]]]:
        """``(repeat, router, load, B)`` in run order: repeats outermost, then routers, loads, thresholds."""
        return [
            (rep, router, load, b)
            for rep in range(self.repeats)
            for router in self.routers
            for load in self.loads
            for b in self.vectors(load)
        ]


def make_plan(
    num_models: int,
    concurrencies: Sequence[int],
    routers: Sequence[RouterChoice],
    thresholds: Sequence[Sequence[int]] | None = None,
    full_grid_max_n: int = FULL_GRID_MAX_N,
    rates: Sequence[float] = (),
    arrival_seed: int = 0,
    **timing: Any,
) -> CrossvalPlan:
    """A plan over ``concurrencies`` and ``rates`` (requests/s); ``thresholds`` (if given) restricts every N to
    those vectors (infeasible ones for an N are left out there) and is what every rate runs; without it a rate
    runs every threshold 1 (the feasible set is a closed-loop notion: see :func:`rate_vectors`)."""
    if (not concurrencies and not rates) or any(n < 1 for n in concurrencies):
        raise ConfigError("concurrency", f"needs values >= 1, got {list(concurrencies)}")
    if any(not (math.isfinite(r) and r > 0) for r in rates):
        raise ConfigError("rate", f"needs finite rates > 0 (requests/s), got {list(rates)}")
    if not routers:
        raise ConfigError("routers", "needs at least one router")
    for b in thresholds or ():
        if len(b) != num_models:
            raise ConfigError("thresholds", f"each vector needs {num_models} values, got {list(b)}")
    table = {n: closed_vectors(num_models, n, thresholds, full_grid_max_n) for n in concurrencies}
    for key in ("warmup_s", "measure_s"):
        if key in timing and not timing[key] >= 0:
            raise ConfigError(key, f"must be >= 0, got {timing[key]}")
    unique = tuple(dict.fromkeys(concurrencies))
    open_loop = {"rates": tuple(dict.fromkeys(map(float, rates))), "arrival_seed": arrival_seed,
                 "rate_thresholds": rate_vectors(num_models, thresholds) if rates else ()}  # fmt: skip
    return CrossvalPlan(tuple(routers), unique, table, full_grid_max_n=full_grid_max_n, **open_loop, **timing)


def closed_vectors(
    num_models: int, concurrency: int, thresholds: Sequence[Sequence[int]] | None, full_grid_max_n: int
) -> list[tuple[int, ...]]:
    """The threshold vectors of a closed-loop cell: the given ones feasible at ``concurrency``, or without any
    :func:`threshold_vectors`; refuses an empty set."""
    if thresholds is None:
        vectors = threshold_vectors(num_models, concurrency, full_grid_max_n)
    else:
        vectors = [tuple(b) for b in thresholds if is_feasible(b, concurrency)]
    if not vectors:
        raise ConfigError("thresholds", f"no feasible threshold vector at concurrency {concurrency}")
    return vectors


def rate_vectors(num_models: int, thresholds: Sequence[Sequence[int]] | None) -> tuple[tuple[int, ...], ...]:
    """The threshold vectors of an open-loop cell: the given ones, or every threshold 1 without any. Feasibility
    (``sum(B_i - 1) < N``) keeps a closed loop from waiting forever; under open load more requests keep arriving,
    so any vector runs (with no maximum wait, a model waits for ``B_i`` ready requests in the real stack and the
    simulator alike)."""
    return tuple(tuple(b) for b in thresholds) if thresholds else ((1,) * num_models,)
