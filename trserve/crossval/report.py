"""Cross-validation results: per-cell errors, the per-router summary, a markdown table and a figure."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trserve.crossval.breakdown_report import breakdown_lines
from trserve.crossval.fidelity import LATENCY_METRICS
from trserve.crossval.plan import Load, Rate, cell_load

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


def load_label(cell: Mapping[str, Any]) -> str:
    """A cell's load as the tables show it: N, or the rate in requests/s with the rate its scored windows' arrivals
    offered (a Poisson draw: it differs from the rate by about 1 / sqrt(rate x window))."""
    offered = f" ({cell['offered_rps']:.1f} offered)" if cell.get("offered_rps") is not None else ""
    return str(cell_load(cell)) + offered


def _load_order(load: Load) -> tuple[int, float]:
    return (1, load.rps) if isinstance(load, Rate) else (0, float(load))


def summarize(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per router: median and max relative error of each predictor over the cells it predicts (the throughput
    model is closed-loop only: None where no cell has it), and whether each predictor's best vector is within 2%
    of the measured best at every N (``best_by_n`` has the details; None at a rate: below saturation every vector
    carries the offered load, so throughput does not rank them)."""
    summary: dict[str, Any] = {}
    for router in dict.fromkeys(c["router"] for c in cells):
        mine = [c for c in cells if c["router"] == router]
        entry: dict[str, Any] = {"num_cells": len(mine)}
        by_n: dict[str, Any] = {}
        for load in sorted({cell_load(c) for c in mine}, key=_load_order):
            group = [c for c in mine if cell_load(c) == load]
            by_n[str(load)] = {p: None if isinstance(load, Rate) else best_choice(group, p) for p in PREDICTORS}
        for p in PREDICTORS:
            errors = [c[f"{p}_rel_error"] for c in mine if c[f"{p}_rel_error"] is not None]
            matches = [v[p]["matches"] for v in by_n.values() if v[p] is not None]
            entry[f"{p}_median_rel_error"] = statistics.median(errors) if errors else None
            entry[f"{p}_max_rel_error"] = max(errors) if errors else None
            entry[f"{p}_best_matches"] = all(matches) if matches else None
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
        "| router | N or rate | thresholds | measured tok/s | model tok/s | model err | sim tok/s | sim err |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        spread = f" ±{c['measured_half_range']:.1f}" if c.get("measured_half_range") else ""
        lines.append(
            f"| {c['router']} | {load_label(c)} | {tuple(c['thresholds'])} | {c['measured_tok_s']:.1f}{spread} "
            f"| {_num(c['model_tok_s'], '.1f')} | {_pct(c['model_rel_error'])} | {c['sim_tok_s']:.1f} "
            f"| {_pct(c['sim_rel_error'])} |"
        )
    lines += [
        "",
        "| router | model median err | model max err | model best ok | sim median err | sim max err | sim best ok |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for router, s in summary.items():
        lines.append(
            f"| {router} | {_pct(s['model_median_rel_error'])} | {_pct(s['model_max_rel_error'])} | "
            f"{_flag(s['model_best_matches'])} | {_pct(s['sim_median_rel_error'])} | {_pct(s['sim_max_rel_error'])} | "
            f"{_flag(s['sim_best_matches'])} |"
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


def _num(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def _flag(value: bool | None) -> str:
    return "–" if value is None else str(value)


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
            f"| {router} | {_pct(d['model_rescaled_median_rel_error'])} | {_pct(d['model_rescaled_max_rel_error'])} "
            f"| {_pct(d['sim_rescaled_median_rel_error'])} | {_pct(d['sim_rescaled_max_rel_error'])} "
            f"| {slow} | {busy} |"
        )
    return lines


def plot_cells(cells: Sequence[Mapping[str, Any]], path: str | Path, title: str) -> None:
    """One panel per (router, load): measured vs model (closed loop) vs simulator throughput for each threshold
    vector."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routers = list(dict.fromkeys(c["router"] for c in cells))
    loads = sorted({cell_load(c) for c in cells}, key=_load_order)
    fig, axes = plt.subplots(len(routers), len(loads), figsize=(4.2 * len(loads), 3.4 * len(routers)), squeeze=False)
    for i, router in enumerate(routers):
        for j, load in enumerate(loads):
            _panel(axes[i][j], [c for c in cells if c["router"] == router and cell_load(c) == load])
            axes[i][j].set_title(f"{router}, {load}" if isinstance(load, Rate) else f"{router}, N={load}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, group: Sequence[Mapping[str, Any]]) -> None:
    xs = list(range(len(group)))
    labels = [",".join(map(str, c["thresholds"])) for c in group]
    ax.plot(xs, [c["measured_tok_s"] for c in group], "ko-", label="measured", ms=4)
    if all(c["model_tok_s"] is not None for c in group):  # closed loop only
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
