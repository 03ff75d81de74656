"""What a cross-validation run covers: routers, concurrencies, threshold vectors per concurrency, the workload
and the window lengths (pure: no engine, no clock)."""

from __future__ import annotations

from collections.abc import Sequence
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
    """The cells: every router x concurrency x threshold vector (``thresholds[N]``), each run for
    ``warmup_s`` + ``measure_s``, ``repeats`` times (cells interleaved, so slow drift spreads over all)."""

    routers: tuple[RouterChoice, ...]
    concurrencies: tuple[int, ...]
    thresholds: dict[int, list[tuple[int, ...]]]
    max_tokens: int = 96
    warmup_s: float = 3.0
    measure_s: float = 12.0
    repeats: int = 1
    full_grid_max_n: int = FULL_GRID_MAX_N

    @property
    def num_cells(self) -> int:
        return len(self.routers) * sum(len(self.thresholds[n]) for n in self.concurrencies) * self.repeats

    @property
    def run_seconds(self) -> float:
        """Wall time of the measured cells alone (engine start-up and predictions come on top)."""
        return self.num_cells * (self.warmup_s + self.measure_s)

    def cells(self) -> list[tuple[int, RouterChoice, int, tuple[int, ...]]]:
        """``(repeat, router, N, B)`` in run order: repeats outermost, then routers, N, thresholds."""
        return [
            (rep, router, n, b)
            for rep in range(self.repeats)
            for router in self.routers
            for n in self.concurrencies
            for b in self.thresholds[n]
        ]


def make_plan(
    num_models: int,
    concurrencies: Sequence[int],
    routers: Sequence[RouterChoice],
    thresholds: Sequence[Sequence[int]] | None = None,
    full_grid_max_n: int = FULL_GRID_MAX_N,
    **timing: Any,
) -> CrossvalPlan:
    """A plan over ``concurrencies``; ``thresholds`` (if given) restricts every N to those vectors (infeasible
    ones for an N are left out there)."""
    if not concurrencies or any(n < 1 for n in concurrencies):
        raise ConfigError("concurrency", f"needs values >= 1, got {list(concurrencies)}")
    if not routers:
        raise ConfigError("routers", "needs at least one router")
    table: dict[int, list[tuple[int, ...]]] = {}
    for n in concurrencies:
        if thresholds is None:
            table[n] = threshold_vectors(num_models, n, full_grid_max_n)
        else:
            for b in thresholds:
                if len(b) != num_models:
                    raise ConfigError("thresholds", f"each vector needs {num_models} values, got {list(b)}")
            table[n] = [tuple(b) for b in thresholds if is_feasible(b, n)]
        if not table[n]:
            raise ConfigError("thresholds", f"no feasible threshold vector at concurrency {n}")
    for key in ("warmup_s", "measure_s"):
        if key in timing and not timing[key] >= 0:
            raise ConfigError(key, f"must be >= 0, got {timing[key]}")
    unique = tuple(dict.fromkeys(concurrencies))
    return CrossvalPlan(tuple(routers), unique, table, full_grid_max_n=full_grid_max_n, **timing)
