"""Open-loop cells of a bench run (``--rate`` / ``--arrivals``): per (system, router) server, one cell per rate (or
the trace), ``repetitions`` windows of :func:`trserve.bench.open_loop.run_open_load` each; and their predictions,
the simulator over the windows' own arrival times (a rate's seeded draws, or the trace) for the routed TokenRouter
systems (``trserve.bench.open_predict``).

Baselines (``lockstep``, ``per-token``, ``llm-only``, ``vllm-server``) get measured figures only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trserve.bench.cells import OpenCell
from trserve.bench.open_loop import run_open_load
from trserve.bench.open_predict import sim_at_arrivals
from trserve.bench.servers import Started

#: The routed systems the simulator predicts, and the simulator baseline each one is.
SIM_BASELINE = {"tokenrouter": "tokenrouter", "tokenrouter-bstar": "tokenrouter", "tokenrouter-readmit": "tokenrouter",
                "tokenrouter-b1": "b1"}  # fmt: skip


def measure(runner: Any, server: Started, system: str, router: str, table: Mapping[int, Sequence[int]] | None,
            probe: Callable[[], dict[str, Any]]) -> None:  # fmt: skip
    """Every open-loop cell of ``system`` routed by ``router`` on the running ``server`` (a
    :class:`trserve.bench.runner.BenchRunner` records them)."""
    plan = runner.plan
    assert plan.open is not None
    duration_s = plan.workload.warmup_s + plan.workload.window_s
    for rate in plan.open.keys:
        cell = OpenCell(system, router, 0, rate_rps=rate,
                        threshold_table={int(n): list(b) for n, b in table.items()} if table else None)  # fmt: skip

        def window(rep: int, rate: float | None = rate) -> Any:
            arrivals = plan.open.arrivals(rate, rep, duration_s)
            return run_open_load(server.url, arrivals, plan.workload, probe)

        runner.measure(cell, server, window)


def predict(runner: Any, cell: OpenCell) -> None:
    """The simulator over ``cell``'s windows' arrivals for a routed system once its router's statistics are known (set
    ``latency_source`` and ``sim``; with ``--stack`` also ``sim_stack``); otherwise say why there is none."""
    state = runner.routers.get(cell.router)
    if cell.system not in SIM_BASELINE:
        cell.latency_source = "none: a baseline (measured figures only)"
        return
    if state is None:
        return  # predicted once the router's tokenrouter-b1 cells taught its statistics
    tables, cell.latency_source = state.tables, state.latency_source
    if cell.system == "tokenrouter-readmit":
        tables, cell.latency_source = runner.readmit_tables(tables, cell.latency_source)
    plan = runner.plan
    duration_s = plan.workload.warmup_s + plan.workload.window_s
    windows = [plan.open.arrivals(cell.rate_rps, rep, duration_s) for rep in range(len(cell.windows))]  # as sent
    args = (state.P, state.C, tables, windows, plan.workload, cell.threshold_table, SIM_BASELINE[cell.system])
    cell.sim = sim_at_arrivals(*args, plan.table_size, plan.open.seed)
    if plan.stack is not None:
        cell.sim_stack = sim_at_arrivals(*args, plan.table_size, plan.open.seed, plan.stack)
