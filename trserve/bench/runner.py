"""Runs the benchmark matrix: one server start per (system, router), every concurrency and repetition on it,
with a live progress display and the predicted figure printed next to each measured one.

Per router, ``tokenrouter-b1`` runs first: its counters give the routing statistics (P, C) from which the
optimizer picks ``B*`` per concurrency for ``tokenrouter`` and ``tokenrouter-readmit`` (a threshold table keyed
by the number of active requests, so one server covers every N). Under open-loop load (``--rate``, ``--arrivals``)
each server runs one cell per rate instead (``trserve.bench.open_cells``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from trcore.errors import NotIrreducibleError
from trserve import eventloop
from trserve.bench import cpu, open_cells, predict, window_stats
from trserve.bench.cells import BenchPlan, Cell, OpenCell, RouterState
from trserve.bench.client import LoadResult, run_load
from trserve.bench.direct import run_direct_process
from trserve.bench.matched import quality_for
from trserve.bench.servers import Started, started
from trserve.bench.sim_inputs import SimInputs, cell_inputs
from trserve.bench.systems import EXTERNAL, OPTIMIZED, SINGLE_MODEL
from trserve.hardware import hardware_tag


class BenchRunner:
    """Runs a :class:`BenchPlan`; ``display`` gets progress events (see ``trserve.bench.display``)."""

    def __init__(self, plan: BenchPlan, display: Any) -> None:
        window_stats.check_num_models(len(plan.base["models"]))  # before any server starts, not after the b1 runs
        self.plan = plan
        self.display = display
        self.cells: list[Cell] = []
        self.routers: dict[str, RouterState] = {}
        self.direct: dict[str, Any] | None = None
        #: Per system not served by TokenRouter (``vllm-server``): its command, environment and start-up time.
        self.external: dict[str, dict[str, Any]] = {}
        #: Called after each server run, so a long bench leaves its results so far on disk if it is cut short.
        self.on_checkpoint: Any = None

    def run(self) -> None:
        order = [s for s in self.plan.systems if s not in SINGLE_MODEL]
        if any(s in OPTIMIZED for s in order) and "tokenrouter-b1" not in order:
            order.insert(0, "tokenrouter-b1")  # the optimizer needs its routing statistics
        order.sort(key=lambda s: s != "tokenrouter-b1")
        for router in self.plan.routers:
            for system in order:
                self._run_system(system, router)
                if system == "tokenrouter-b1":
                    self.routers[router] = self._learn(router)
                    for cell in self.cells:  # predicted now that the routing statistics are known
                        if cell.router == router and cell.predicted_model is None:
                            self._predict(cell)
                            self.display.cell_done(cell)
        for system in SINGLE_MODEL:
            if system in self.plan.systems:
                self._run_system(system, "none")
        if self.plan.direct and "llm-only" in self.plan.systems:
            self._run_direct()

    def _model_names(self, system: str) -> list[str]:
        """The models whose TokenRouter counters a system's cells read (none for vLLM's own server)."""
        models = self.plan.base["models"]
        if system in EXTERNAL:
            return []
        return [models[-1]["name"]] if system == "llm-only" else [m["name"] for m in models]

    def _run_system(self, system: str, router: str) -> None:
        state = self.routers.get(router)
        table = _threshold_table(system, state) if state and system in OPTIMIZED else None
        self.display.starting(system, router)
        with started(self.plan.base, system, router, table) as server:
            if server.description:
                self.external[system] = server.description

            def probe() -> dict[str, Any]:
                return cpu.snapshot(server.pid)

            if self.plan.open is not None:
                open_cells.measure(self, server, system, router, table, probe)
            else:
                for n in self.plan.concurrencies:
                    cell = Cell(system, router, n, thresholds=table.get(n) if table else None)

                    def window(_rep: int, n: int = n) -> Coroutine[Any, Any, LoadResult]:
                        return run_load(server.url, n, self.plan.workload, probe)

                    self.measure(cell, server, window)
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def measure(self, cell: Cell, server: Started, window: Callable[[int], Coroutine[Any, Any, LoadResult]]) -> None:
        """``repetitions`` windows of ``cell`` on ``server`` (``window(rep)`` measures one), then its predictions."""
        cell.router_params = server.router["params"] if server.router else None
        cell.quality = quality_for(self.plan.base, cell.system, cell.router, cell.router_params)
        for rep in range(self.plan.repetitions):
            self.display.running(cell, rep)
            load = eventloop.run(window(rep))
            cell.loads.append(load)
            cell.stats.append(
                window_stats.step_stats(load.metrics_after, load.metrics_before, self._model_names(cell.system))
            )
            self.display.measured(cell)
        self.cells.append(cell)
        self._predict(cell)
        self.display.cell_done(cell)

    def _learn(self, router: str) -> RouterState:
        b1 = [c for c in self.cells if c.router == router and c.system == "tokenrouter-b1"]
        pooled = window_stats.pool_stats([s for c in b1 for s in c.stats])
        P, C = window_stats.routing_matrices(pooled)
        tables, source = self._tables(b1, self._model_names("tokenrouter-b1"), profiles=True)
        try:
            results = predict.optimize_table(P, C, tables, self.plan.concurrencies, self.plan.min_gain)
        except NotIrreducibleError as exc:  # no throughput model for these statistics: run B = 1, predict nothing
            ones = {n: [1] * len(tables) for n in self.plan.concurrencies}
            self.display.learned(router, P, C, f"{source}; no model prediction: {exc}", ones)
            return RouterState(P, C, tables, f"{source}; no model prediction: {exc}", ones, ones,
                               {n: 0.0 for n in ones})  # fmt: skip
        optimized = {n: list(r.thresholds) for n, r in results.items()}
        free = {n: predict.unconstrained_best(r) for n, r in results.items()}
        self.display.learned(router, P, C, source, optimized)
        return RouterState(
            P, C, tables, source, optimized, {n: b for n, (b, _) in free.items()}, {n: g for n, (_, g) in free.items()}
        )

    def _tables(
        self, cells: Sequence[Cell], names: list[str], profiles: bool, emulated: bool = True
    ) -> tuple[list[list[float]], str]:
        """Latency tables: an emulated config's own latencies (unless ``emulated`` is False), else the calibration
        profiles (when ``profiles`` and all exist), else a line through the cells' (mean batch, mean step)
        points; a model that never stepped falls back to its profile."""

        top = self.plan.table_size
        given = predict.emulated_tables(self.plan.base, names, top) if emulated else None
        if given is not None:
            return given, "emulated latencies (the config's)"
        tag, drift = hardware_tag(), self.plan.drift
        found = [predict.profile_table(n, tag, top, factor=drift.factor(tag, n)) for n in names]
        if profiles and all(t is not None for t in found):
            return [t for t in found if t is not None], f"calibration profile ({tag}){drift.source_note(tag, names)}"
        tables = []
        for m, fallback in enumerate(found):
            points = [(s[m].mean_batch, s[m].mean_step_s) for c in cells for s in c.stats]
            try:
                tables.append(predict.line_table(predict.fit_line(points), top))
            except ValueError:
                if fallback is None:
                    raise
                tables.append(fallback)
        return tables, "fit to this run's step times"

    def _predict(self, cell: Cell) -> None:
        """Out-of-sample model and simulator figures for ``cell`` (latencies from the calibration profiles, routing
        statistics from the ``tokenrouter-b1`` runs), and, labelled apart, the model fed this cell's own measured
        step times (a diagnosis, never a result). Systems whose engines run on another core layout than the
        profiles' (lockstep and llm-only give every engine all cores) are predicted from profiles of that placement
        (``<tag>-allcores``, made by ``tokenrouter calibrate`` on ``configs/allcores-*.yaml``), else "-"."""
        n = cell.concurrency
        if isinstance(cell, OpenCell):
            open_cells.predict(self, cell)
            return
        if cell.system in EXTERNAL:
            cell.latency_source = "none: vLLM's own server (its scheduler is not modelled)"
            return
        if cell.system in ("llm-only", "lockstep"):
            self._predict_all_cores(cell)
            return
        if cell.system == "per-token":
            self._predict_per_token(cell)
            return
        state = self.routers.get(cell.router)
        if state is None:
            return
        tables, cell.latency_source = state.tables, state.latency_source
        if cell.system == "tokenrouter-readmit":
            tables, cell.latency_source = self.readmit_tables(tables, cell.latency_source)
        P, C, thresholds = self._routing(cell)
        baseline = _SIM_BASELINE[cell.system]
        cell.predicted_model = predict.model_prediction(P, C, tables, n, thresholds)
        cell.predicted_own_routing = predict.own_routing_prediction(cell.stats, tables, n, thresholds)
        inputs, tokens = self.sim_inputs(cell), self.plan.sim_tokens
        cell.predicted_sim = predict.sim_prediction(P, C, tables, n, thresholds, baseline, tokens, inputs=inputs)
        if self.plan.stack is not None and cell.system in STACK_SYSTEMS:
            cell.predicted_sim_stack = predict.sim_prediction(
                P, C, tables, n, thresholds, baseline, tokens, self.plan.stack, inputs=inputs
            )
        self._diagnose(cell, P, C, thresholds)

    def _predict_all_cores(self, cell: Cell) -> None:
        tag = f"{hardware_tag()}-allcores"
        top = max(self.plan.concurrencies)
        found: list[list[float] | None] | None = predict.emulated_tables(
            self.plan.base, self._model_names(cell.system), top
        )
        source = "emulated latencies (the config's)"
        if found is None:
            names, drift = self._model_names(cell.system), self.plan.drift
            found = [predict.profile_table(name, tag, top, factor=drift.factor(tag, name)) for name in names]
            source = f"calibration profile ({tag}){drift.source_note(tag, names)}"
        P, C, thresholds = self._routing(cell)
        if cell.system == "lockstep" and cell.router not in self.routers:
            return
        if all(t is not None for t in found):
            tables = [t for t in found if t is not None]
            cell.latency_source = source
            cell.predicted_model = predict.model_prediction(P, C, tables, cell.concurrency, thresholds)
            sim_baseline = "lockstep" if cell.system == "lockstep" else "tokenrouter"
            sim_b = [1] * len(tables) if cell.system == "lockstep" else thresholds
            cell.predicted_sim = predict.sim_prediction(P, C, tables, cell.concurrency, sim_b, sim_baseline,
                                                        self.plan.sim_tokens, inputs=self.sim_inputs(cell))  # fmt: skip
        else:
            cell.latency_source = f"none: no profile of this placement ({tag})"
        self._diagnose(cell, P, C, thresholds)

    def sim_inputs(self, cell: Cell) -> SimInputs:
        """The cell's own requests and KV pools for the simulator (``trserve.bench.sim_inputs``), recorded on it."""
        return cell_inputs(self.plan.workload, self.plan.base, self._model_names(cell.system), cell)

    def _routing(self, cell: Cell) -> tuple[list[list[float]], list[list[float]], list[int]]:
        """P, C and the thresholds the model reads for ``cell`` (lockstep: the entry model waits for the batch)."""
        n = cell.concurrency
        if cell.system == "llm-only":
            return [[1.0]], [[1.0]], [1]
        state = self.routers[cell.router]
        thresholds = [n, 1] if cell.system == "lockstep" else _model_thresholds(cell.system, n, state)
        return state.P, state.C, thresholds

    def _diagnose(self, cell: Cell, P: list[list[float]], C: list[list[float]], thresholds: list[int]) -> None:
        """The model fed this cell's own measured step times: what the runtime could reach if its engines stepped
        as they did here (separates scheduling and IPC loss from slower steps). In-sample: a diagnosis."""
        try:
            own_tables, _ = self._tables([cell], self._model_names(cell.system), profiles=False, emulated=False)
        except ValueError:
            return
        cell.predicted_own_steps = predict.model_prediction(P, C, own_tables, cell.concurrency, thresholds)

    def _predict_per_token(self, cell: Cell) -> None:
        """Per-token serving has no throughput model (every token is a new request): the simulator only, pricing
        the recompute with the profiles' extend term at the engines' block size, or "-" without profiles."""
        state = self.routers.get(cell.router)
        emulated = predict.emulated_tables(self.plan.base, self._model_names(cell.system), max(self.plan.concurrencies))
        if state is not None and emulated is not None:
            cell.latency_source = "emulated latencies (the config's), no recompute"
            cell.predicted_sim = predict.emulated_per_token_prediction(
                state.P, state.C, emulated, cell.concurrency, self.plan.sim_tokens
            )
            self._diagnose(cell, *self._routing(cell))
            return
        names, tag = self._model_names(cell.system), hardware_tag()
        models = predict.profile_models(names, tag, self.plan.drift.factors(tag, names))
        if state is None or models is None:
            cell.latency_source = "none: no extend-aware profile"
            return
        block = int(self.plan.base["models"][0].get("block_size", 32))
        note = self.plan.drift.source_note(tag, names)
        cell.latency_source = f"calibration profile ({tag}){note}, recompute at block size {block}"
        cell.predicted_sim = predict.per_token_prediction(
            state.P, state.C, models, cell.concurrency, block, self.plan.sim_tokens
        )
        self._diagnose(cell, *self._routing(cell))

    def readmit_tables(self, tables: list[list[float]], source: str) -> tuple[list[list[float]], str]:
        """Profile latencies with re-admission's recompute: half a KV block per request per step (the partial
        last block is not prefix-cached); the session tables when no profile exists."""

        names, models = self._model_names("tokenrouter"), self.plan.base["models"]
        tag = hardware_tag()
        found = [
            predict.profile_table(n, tag, len(t), (m.get("block_size", 32) - 1) / 2, self.plan.drift.factor(tag, n))
            for n, t, m in zip(names, tables, models, strict=True)
        ]
        if all(t is not None for t in found):
            return [t for t in found if t is not None], f"{source}, half a KV block recomputed per request"
        return tables, source

    def _run_direct(self) -> None:

        self.display.starting("vllm-direct", "none")
        self.direct = run_direct_process(
            self.plan, concurrency=8 if 8 in self.plan.concurrencies else max(self.plan.concurrencies)
        )
        self.display.direct_done(self.direct)


_SIM_BASELINE = {"tokenrouter": "tokenrouter", "tokenrouter-bstar": "tokenrouter", "tokenrouter-readmit": "tokenrouter",
                 "tokenrouter-b1": "b1"}  # fmt: skip
#: The systems whose subserver loops a stack probe measures (the routed pair, session hand-off).
STACK_SYSTEMS = ("tokenrouter", "tokenrouter-bstar", "tokenrouter-b1")


def _threshold_table(system: str, state: RouterState) -> dict[int, list[int]]:
    """The thresholds per concurrency a system runs: the unconstrained best for ``tokenrouter-bstar``, else B*."""
    return state.unconstrained if system == "tokenrouter-bstar" else state.optimized


def _model_thresholds(system: str, n: int, state: RouterState) -> list[int]:
    return list(_threshold_table(system, state)[n]) if system in OPTIMIZED else [1, 1]
