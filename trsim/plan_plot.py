"""The plan's figure (matplotlib, headless): closed-loop throughput by concurrency, and Poisson capacity."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plot_plan(plan: Mapping[str, Any], path: str | Path | None = None, num_lines: int = 6) -> Any:
    """Left: best throughput over the threshold candidates against concurrency, for the top placements.
    Right: max Poisson rate under the SLO of every placement whose pipeline was bisected. Writes ``path``
    (headless), or returns the figure when ``path`` is None (notebooks)."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placements = plan["placements"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    for p in placements[:num_lines]:
        best: dict[int, float] = {}
        for point in p["points"]:
            n = point["concurrency"]
            best[n] = max(best.get(n, 0.0), point["throughput_tok_s"])
        xs = sorted(best)
        left.plot(xs, [best[x] for x in xs], marker="o", label=f"{p['label']} ({p['num_gpus']} GPUs)")
    left.set(xlabel="concurrent requests N", ylabel="committed tok/s", title="Closed loop (best thresholds per N)")
    left.set_xscale("log", base=2)
    if placements:  # none: the pair fits no placement (the large model alone is in the table)
        left.legend(fontsize=7)
    rated = [p for p in placements if p.get("max_rate_rps") is not None]
    rated.sort(key=lambda p: p["max_rate_rps"])
    right.barh([f"{p['label']} ({p['num_gpus']} GPUs)" for p in rated], [p["max_rate_rps"] for p in rated])
    cfg = plan["config"]
    slo = ", ".join(f"{k} p99 <= {cfg[f'slo_{k}_ms']:g} ms" for k in ("tpot", "ttft") if cfg[f"slo_{k}_ms"])
    right.set(xlabel="requests/s", title=f"Open loop ({cfg['workload']}): max Poisson rate\n{slo}")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"Plan: {', '.join(cfg['models'].values())} on {cfg['num_gpus']}x {cfg['hardware']}")
    fig.tight_layout()
    if path is None:
        return fig
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
