"""The live display of a bench run: a rich progress bar over every window, and one line per finished cell with
the measured figure (median, min-max) next to the throughput model's and the simulator's."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trserve.bench.open_report import open_line


class BenchDisplay:
    """Progress events from :class:`trserve.bench.runner.BenchRunner`; a context manager around the run."""

    def __init__(self, total_windows: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=False,
        )  # fmt: skip
        self.task = self.progress.add_task("bench", total=total_windows)

    def __enter__(self) -> BenchDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def starting(self, system: str, router: str) -> None:
        self.progress.update(self.task, description=f"starting {system} / {router}")

    def running(self, cell: Any, rep: int) -> None:
        where = getattr(cell, "load_label", None) or f"N={cell.concurrency}"
        self.progress.update(self.task, description=f"{cell.system} / {cell.router} {where} rep {rep + 1}")

    def measured(self, cell: Any) -> None:
        self.progress.advance(self.task)

    def learned(self, router: str, P: Any, C: Any, source: str, optimized: dict[int, list[int]]) -> None:
        p = ", ".join(f"{row[0]:.3f}/{row[-1]:.3f}" for row in P)
        c = ", ".join(f"{row[0]:.2f}/{row[-1]:.2f}" for row in C)
        self.console.print(f"[cyan]{router}[/]: P rows {p}; C rows {c}; latencies from {source}; B* {optimized}")

    def cell_done(self, cell: Any) -> None:
        if hasattr(cell, "load_label"):
            self.console.print(open_line(cell))
            return
        tputs = [x.throughput_tok_s for x in cell.loads]
        figures = {"model": cell.predicted_model, "sim": cell.predicted_sim,
                   "model with measured steps": cell.predicted_own_steps,
                   "model with this cell's routing": cell.predicted_own_routing}  # fmt: skip
        shown = [f"{name} {v:.1f}" for name, v in figures.items() if v is not None]
        pred = f" | predicted: {', '.join(shown)}" if shown else ""
        b = f" B={cell.thresholds}" if cell.thresholds else ""
        self.console.print(
            f"{cell.system:>20} {cell.router:>7} N={cell.concurrency:<2}{b}: {statistics.median(tputs):7.1f} tok/s "
            f"({min(tputs):.1f}-{max(tputs):.1f}){pred}"
        )

    def direct_done(self, result: dict[str, Any]) -> None:
        self.console.print(
            f"{'vllm-direct':>20} {'none':>7} N={result['concurrency']:<2}: {result['throughput_tok_s']:7.1f} tok/s"
        )
