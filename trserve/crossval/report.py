"""Cross-validation results: per-cell errors, the per-router summary, a markdown table and a figure."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trserve.crossval.breakdown_report import breakdown_lines
from trserve.crossval.fidelity import LATENCY_METRICS

#: A predictor's best threshold vector "matches" when its measured throughput is within this of the best.
BEST_TOLERANCE = 0.02
PREDICTORS = ("model", "sim")


def rel_error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured if measured > 0 else float("inf")


def add_errors(cell: dict[str, Any]) -> dict[str, Any]:
    """Fill ``<predictor>_rel_error`` from ``measured_tok_s`` and ``<predictor>_tok_s``."""
    for p in PREDICTORS:
        pred = cell.get(f"{p}_tok_s")
        cell[f"{p}_rel_error"] = None if pred is None else rel_error(pred, cell["measured_tok_s"])
    return cell


def best_choice(cells: Sequence[Mapping[str, Any]], predictor: str) -> dict[str, Any]:
    """For one router and N: the measured best vector, the predictor's pick and whether the pick is within
    :data:`BEST_TOLERANCE` of the measured best in measured throughput."""
    measured_best = max(cells, key=lambda c: c["measured_tok_s"])
    picked = max(cells, key=lambda c: c[f"{predictor}_tok_s"])
    shortfall = 1.0 - picked["measured_tok_s"] / measured_best["measured_tok_s"]
    return {
        "measured_best": list(measured_best["thresholds"]),
        "measured_best_tok_s": measured_best["measured_tok_s"],
        "picked": list(picked["thresholds"]),
        "picked_measured_tok_s": picked["measured_tok_s"],
        "shortfall": shortfall,
        "matches": shortfall <= BEST_TOLERANCE,
    }


def summarize(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per router: median and max relative error of each predictor, and whether each predictor's best vector
    is within 2% of the measured best at every concurrency (``best_by_n`` has the details)."""
    summary: dict[str, Any] = {}
    for router in dict.fromkeys(c["router"] for c in cells):
        mine = [c for c in cells if c["router"] == router]
        entry: dict[str, Any] = {"num_cells": len(mine)}
        by_n: dict[str, Any] = {}
        for n in sorted({c["concurrency"] for c in mine}):
            group = [c for c in mine if c["concurrency"] == n]
            by_n[str(n)] = {p: best_choice(group, p) for p in PREDICTORS}
        for p in PREDICTORS:
            errors = [c[f"{p}_rel_error"] for c in mine]
            entry[f"{p}_median_rel_error"] = statistics.median(errors)
            entry[f"{p}_max_rel_error"] = max(errors)
            entry[f"{p}_best_matches"] = all(v[p]["matches"] for v in by_n.values())
        entry["best_by_n"] = by_n
        summary[router] = entry
    return summary


def markdown_table(
    cells: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    diagnosis: Mapping[str, Any] | None = None,
    inputs: str = "",
) -> str:
    """The per-cell table ("±" is half the range of the scored repeats: for two, half their gap), the per-router
    summary, the latency-fidelity table and the labelled in-sample diagnosis, in markdown."""
    lines = [f"Prediction inputs: {inputs}.", ""] if inputs else []
    lines += [
        "| router | N | thresholds | measured tok/s | model tok/s | model err | sim tok/s | sim err |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        spread = f" ±{c['measured_half_range']:.1f}" if c.get("measured_half_range") else ""
        lines.append(
            f"| {c['router']} | {c['concurrency']} | {tuple(c['thresholds'])} | {c['measured_tok_s']:.1f}{spread} "
            f"| {c['model_tok_s']:.1f} | {c['model_rel_error']:.1%} | {c['sim_tok_s']:.1f} | {c['sim_rel_error']:.1%} |"
        )
    lines += [
        "",
        "| router | model median err | model max err | model best ok | sim median err | sim max err | sim best ok |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for router, s in summary.items():
        lines.append(
            f"| {router} | {s['model_median_rel_error']:.1%} | {s['model_max_rel_error']:.1%} | "
            f"{s['model_best_matches']} | {s['sim_median_rel_error']:.1%} | {s['sim_max_rel_error']:.1%} | "
            f"{s['sim_best_matches']} |"
        )
    lines += fidelity_lines(summary) if all("latency" in s for s in summary.values()) else []
    lines += breakdown_lines(cells)
    lines += diagnosis_lines(diagnosis) if diagnosis else []
    return "\n".join(lines) + "\n"


def drift_line(drift: dict[str, Any] | None) -> str:
    """The drift probe's outcome as a markdown paragraph ("" for runs written before the probe existed)."""
    if not drift:
        return ""
    if "ratios" not in drift:
        return f"Drift probe: {drift['action']}.\n\n"
    ratios = ", ".join(f"{r:.2f}x" for r in drift["ratios"])
    applied = ", ".join(f"{f:.2f}" for f in drift["factors"])
    return f"Drift probe: the engines stepped at {ratios} their profiles; {drift['action']} (factors {applied}).\n\n"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def fidelity_lines(summary: Mapping[str, Any]) -> list[str]:
    """Simulator vs real beyond throughput: latency percentiles (median / max relative error over the cells),
    batch-size histogram distance per model, hand-off rate and the large model's step share."""
    lines = [
        "",
        "Simulator vs real beyond throughput (median / max over the cells):",
        "",
        "| router | " + " | ".join(LATENCY_METRICS) + " | batch hist. distance per model | hand-offs/token err "
        "| large-model step share diff |",
        "|---|" + "---:|" * len(LATENCY_METRICS) + "---|---:|---:|",
    ]
    for router, s in summary.items():
        lat = [f"{_pct(s['latency'][k]['sim_median_rel_error'])} / {_pct(s['latency'][k]['sim_max_rel_error'])}"
               for k in LATENCY_METRICS]  # fmt: skip
        hist = s["batch_histogram_distance"]
        dist = ", ".join(f"{_num(a)} / {_num(b)}" for a, b in zip(hist["median"], hist["max"], strict=True))
        hand = s["handoffs_per_token"]
        share = s["llm_step_share_abs_diff"]
        lines.append(
            f"| {router} | " + " | ".join(lat) + f" | {dist} | {_pct(hand['sim_median_rel_error'])} / "
            f"{_pct(hand['sim_max_rel_error'])} | {share['median']:.3f} / {share['max']:.3f} |"
        )
    return lines


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def diagnosis_lines(diagnosis: Mapping[str, Any]) -> list[str]:
    """The rescaled-latency errors: what is left once each cell's observed step times replace the calibrated
    (an in-sample diagnosis: the scale factors come from the scored cells themselves)."""
    lines = [
        "",
        "Diagnosis, in sample (not a prediction): each cell's calibrated latencies rescaled to the engine step "
        "times observed in that same cell:",
        "",
        "| router | model median err | model max err | sim median err | sim max err | median slowdown per model "
        "| median busy fraction per model |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for router, d in diagnosis.items():
        slow = ", ".join(f"{x:.2f}x" for x in d["median_slowdown"])
        busy = ", ".join(f"{x:.0%}" for x in d["median_busy_fraction"])
        lines.append(
            f"| {router} | {d['model_rescaled_median_rel_error']:.1%} | {d['model_rescaled_max_rel_error']:.1%} | "
            f"{d['sim_rescaled_median_rel_error']:.1%} | {d['sim_rescaled_max_rel_error']:.1%} | {slow} | {busy} |"
        )
    return lines


def plot_cells(cells: Sequence[Mapping[str, Any]], path: str | Path, title: str) -> None:
    """One panel per (router, N): measured vs model vs simulator throughput for each threshold vector."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routers = list(dict.fromkeys(c["router"] for c in cells))
    ns = sorted({c["concurrency"] for c in cells})
    fig, axes = plt.subplots(len(routers), len(ns), figsize=(4.2 * len(ns), 3.4 * len(routers)), squeeze=False)
    for i, router in enumerate(routers):
        for j, n in enumerate(ns):
            _panel(axes[i][j], [c for c in cells if c["router"] == router and c["concurrency"] == n])
            axes[i][j].set_title(f"{router}, N={n}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, group: Sequence[Mapping[str, Any]]) -> None:
    xs = list(range(len(group)))
    labels = [",".join(map(str, c["thresholds"])) for c in group]
    ax.plot(xs, [c["measured_tok_s"] for c in group], "ko-", label="measured", ms=4)
    ax.plot(xs, [c["model_tok_s"] for c in group], "s--", color="tab:blue", label="model", ms=3)
    ax.plot(xs, [c["sim_tok_s"] for c in group], "^:", color="tab:orange", label="simulator", ms=3)
    if all("sim_rescaled_tok_s" in c for c in group):
        rescaled = [c["sim_rescaled_tok_s"] for c in group]
        ax.plot(xs, rescaled, "v:", color="tab:green", label="simulator, observed step times", ms=3)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("tok/s", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.tick_params(axis="y", labelsize=7)
