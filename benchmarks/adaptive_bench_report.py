"""The tables and plot of ``benchmarks/adaptive_bench.py``'s JSON: per scenario, throughput over time and the
thresholds in force for every strategy, and per phase each strategy's throughput beside the oracle's.

    .venv/bin/python benchmarks/adaptive_bench.py --report docs/bench-sim/adaptive/adaptive.json [--plot PNG]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = doc["scenarios"]
    fig, axes = plt.subplots(2, len(scenarios), figsize=(7 * len(scenarios), 7), squeeze=False, sharex="col")
    for j, sc in enumerate(scenarios):
        top, bottom = axes[0][j], axes[1][j]
        for name, run in sc["runs"].items():
            xs = [b["start_s"] for b in run["bins"]] + [run["bins"][-1]["end_s"]]
            ys = [b["throughput_tok_s"] for b in run["bins"]]
            top.stairs(ys, xs, label=name, baseline=None, linewidth=2.2 if name in ("adaptive", "oracle") else 1.0)
            steps = run["timeline"]
            ts = [t for t, _ in steps]
            for m in range(len(steps[0][1])):
                vals = [v[m] for _, v in steps[:-1]]
                if name in ("adaptive", "oracle") or m == 0:
                    bottom.stairs(vals, ts, label=f"{name} B[{m}]", baseline=None, linestyle="-" if m == 0 else "--")
        for p in sc["runs"]["oracle"]["phases"][1:]:
            top.axvline(p["start_s"], color="grey", linewidth=0.5)
            bottom.axvline(p["start_s"], color="grey", linewidth=0.5)
        top.set_title(f"{sc['name']} ({sc['scenario']})")
        top.set_ylabel("committed tok/s (per bin)")
        bottom.set_ylabel("threshold in force")
        bottom.set_xlabel("simulated time (s)")
        bottom.set_yscale("log", base=2)
        top.legend(fontsize=7)
        bottom.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(doc: dict[str, Any]) -> str:
    """Per scenario a table (strategy, per phase tok/s and ratio to the oracle, overall) and the targets."""
    lines = []
    for sc in doc["scenarios"]:
        phases = sc["runs"]["oracle"]["phases"]
        head = " | ".join(f"phase {p['index']} ({p['start_s']:.0f}-{p['end_s']:.0f} s)" for p in phases)
        lines += [
            f"{sc['name']} (`{sc['scenario']}`), B* per phase {sc['bstar']}, best static: {sc['best_static']}",
            "",
        ]
        lines += [f"| strategy | {head} | whole run |", "|---" * (len(phases) + 2) + "|"]
        for name, run in sc["runs"].items():
            label = name if run["thresholds"] is None else f"{name} {tuple(run['thresholds'])}"
            cells = " | ".join(f"{p['throughput_tok_s']:.1f} ({100 * p['to_oracle']:.1f}%)" for p in run["phases"])
            lines.append(f"| {label} | {cells} | {run['throughput_tok_s']:.1f} ({100 * run['to_oracle']:.1f}%) |")
        t = sc["targets"]
        lines += ["", f"targets: {json.dumps(t)}", f"settling: {json.dumps(sc['settling'])}", ""]
    return "\n".join(lines)
