"""What a bench run is made of: the plan, one cell per (system, router, concurrency) with its measured windows and
predictions (under open-loop load one per (system, router, rate or trace)), and what each router's
``tokenrouter-b1`` runs taught (see ``trserve.bench.runner``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trserve.bench import predict
from trserve.bench.client import LoadResult, Workload
from trserve.bench.drift import NOT_PROBED, BenchDrift
from trserve.bench.open_load import OpenLoad
from trserve.bench.open_loop import OpenLoadResult
from trserve.bench.window_stats import StepStats
from trserve.crossval.stack import StackCosts


@dataclass(frozen=True)
class BenchPlan:
    """What to run: systems x routers x concurrencies, ``repetitions`` windows each."""

    systems: tuple[str, ...]
    routers: tuple[str, ...]
    concurrencies: tuple[int, ...]
    repetitions: int
    workload: Workload
    base: dict[str, Any]
    direct: bool = True
    sim_tokens: int = 20000
    min_gain: float = predict.MIN_GAIN
    #: The drift probe's outcome: factors for the profile latencies (``trserve.bench.drift``).
    drift: BenchDrift = field(default_factory=lambda: BenchDrift("skip", 0.0, note=NOT_PROBED))
    #: The serving stack's measured costs (``--stack``, a crossval probe's ``stack.json``): the routed systems get a
    #: second simulator prediction with them.
    stack: StackCosts | None = None
    #: Open-loop load (``--rate`` / ``--arrivals``) instead of the closed loop; ``concurrencies`` then key the routed
    #: systems' threshold tables (``trserve.bench.open_load.TABLE_CONCURRENCIES``).
    open: OpenLoad | None = None

    @property
    def table_size(self) -> int:
        """Batch sizes the latency tables cover: the largest concurrency, and under open load (where requests can
        pile up) the server's ``max_active_requests`` if larger."""
        top = max(self.concurrencies)
        if self.open is None:
            return top
        return max(top, int(self.base.get("server", {}).get("max_active_requests", top)))


@dataclass
class Cell:
    """All repetitions of one (system, router, concurrency)."""

    system: str
    router: str
    concurrency: int
    loads: list[LoadResult] = field(default_factory=list)
    stats: list[list[StepStats]] = field(default_factory=list)
    thresholds: list[int] | None = None
    predicted_model: float | None = None
    predicted_sim: float | None = None
    predicted_sim_stack: float | None = None
    predicted_own_steps: float | None = None
    #: The model fed this cell's own routing statistics (its windows' P and C): a diagnosis, never a result.
    predicted_own_routing: float | None = None
    latency_source: str = ""
    #: What the simulator's figures were given: the requests and the KV pools or free memory (``sim_inputs``).
    sim_inputs: dict[str, Any] | None = None
    #: The routing program's parameters the server ran (None for single-model systems).
    router_params: dict[str, Any] | None = None
    #: The operating point's measured quality when the cell ran one (``trserve.bench.matched``), else None.
    quality: dict[str, Any] | None = None


@dataclass
class OpenCell(Cell):
    """All repetitions of one (system, router, rate) of open-loop load (``rate_rps`` None: the replayed trace);
    ``concurrency`` is 0. The routed systems carry the simulator's figures over the windows' own arrivals
    (``trserve.bench.open_predict``)."""

    rate_rps: float | None = None
    #: B* by number of active requests, the table the server ran (None: B = 1 or a baseline).
    threshold_table: dict[int, list[int]] | None = None
    sim: dict[str, Any] | None = None
    sim_stack: dict[str, Any] | None = None

    @property
    def windows(self) -> list[OpenLoadResult]:
        """The measured windows, each an open-loop run."""
        return [x for x in self.loads if isinstance(x, OpenLoadResult)]

    @property
    def load_label(self) -> str:
        """The cell's load in a few words: ``2 req/s`` or ``trace``."""
        return "trace" if self.rate_rps is None else f"{self.rate_rps:g} req/s"


@dataclass
class RouterState:
    """What the b1 runs of one router taught: P, C, latency tables and the optimizer's threshold table."""

    P: list[list[float]]
    C: list[list[float]]
    tables: list[list[float]]
    latency_source: str
    optimized: dict[int, list[int]]
    #: B* without the minimum-gain rule, and the model's gain of that vector over B = 1 per concurrency.
    unconstrained: dict[int, list[int]] = field(default_factory=dict)
    unconstrained_gain: dict[int, float] = field(default_factory=dict)
