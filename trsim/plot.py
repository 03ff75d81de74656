"""Plots of sweep results (matplotlib, headless)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plot_sweep(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "Threshold sweep") -> None:
    """Throughput against the threshold vector, one panel per scenario and one line per concurrency; the best
    vector of each line is starred. Rows all carrying ``model_tok_s`` (the analytic model) add a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_scenario: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_scenario[row["scenario"]].append(row)
    fig, axes = plt.subplots(len(by_scenario), 1, figsize=(10, 3.6 * len(by_scenario)), squeeze=False)
    for ax, (scenario, srows) in zip(axes[:, 0], by_scenario.items(), strict=True):
        _panel(ax, scenario, srows)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, scenario: str, rows: Sequence[Mapping[str, Any]]) -> None:
    vectors = sorted({tuple(r["thresholds"]) for r in rows})
    position = {v: k for k, v in enumerate(vectors)}
    by_n: dict[int | None, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_n[row["concurrency"]].append(row)
    for n, nrows in sorted(by_n.items(), key=lambda item: item[0] or 0):
        label = f"N={n}" if n is not None else "scenario's N"
        nrows = sorted(nrows, key=lambda r: position[tuple(r["thresholds"])])
        xs = [position[tuple(r["thresholds"])] for r in nrows]
        line = ax.plot(xs, [r["throughput_tok_s"] for r in nrows], marker=".", label=f"{label} sim")[0]
        if all(r.get("model_tok_s") is not None for r in nrows):
            ax.plot(xs, [r["model_tok_s"] for r in nrows], "--", color=line.get_color(), label=f"{label} model")
        best = max(nrows, key=lambda r: r["throughput_tok_s"])
        ax.plot([position[tuple(best["thresholds"])]], [best["throughput_tok_s"]], "*", ms=14, color=line.get_color())
    step = max(1, len(vectors) // 30)
    ax.set_xticks(range(0, len(vectors), step))
    ax.set_xticklabels([",".join(map(str, v)) for v in vectors[::step]], rotation=60, fontsize=7)
    ax.set_xlabel("thresholds B")
    ax.set_ylabel("committed tok/s")
    ax.set_title(scenario)
    ax.legend(fontsize=7, ncol=2)
