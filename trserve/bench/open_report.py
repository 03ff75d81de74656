"""Open-loop bench outputs: one ``open_runs`` entry per (system, router, rate or trace), a markdown table per rate
(measured figures, then measured over the simulator's for the routed systems) and the figure (throughput and TTFT
p99 against the offered rate per system, the simulator's dashed).

Latencies are from each request's arrival time (``trserve.bench.open_loop``), pooled over the windows' finished
requests; throughput is the server's committed-token counter over each window (median, min-max over windows).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trserve.bench.cells import OpenCell
from trserve.bench.memory import cell_memory, window_memory
from trserve.bench.open_predict import FIGURES, ratios
from trserve.bench.report import ANSWERED, cpu_item
from trserve.bench.slo import percentile


def _latencies(cell: OpenCell) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in ("ttft", "tpot", "e2e"):
        pooled = [v for x in cell.loads for v in getattr(x, f"{name}_s")]
        out |= {f"{name}_p50_s": percentile(pooled, 50), f"{name}_p99_s": percentile(pooled, 99)}
    return out


def _models(cell: OpenCell) -> dict[str, Any]:
    """Large-model token share (median over windows), mean batch and step time per model."""
    fractions = [s[-1].tokens / total if len(s) > 1 and (total := sum(m.tokens for m in s)) else 1.0
                 for s in cell.stats]  # fmt: skip
    num, stats = (len(cell.stats[0]) if cell.stats else 0), cell.stats
    return {"llm_token_fraction": statistics.median(fractions) if fractions else None,
            "mean_batch": [statistics.mean(s[m].mean_batch for s in stats) for m in range(num)],
            "mean_step_ms": [1000 * statistics.mean(s[m].mean_step_s for s in stats) for m in range(num)]}  # fmt: skip


def open_item(cell: OpenCell) -> dict[str, Any]:
    """One ``open_runs`` entry (see the module's docstring); per-window lists where a median would hide a trend."""
    loads, tputs = cell.windows, [x.throughput_tok_s for x in cell.windows]
    item: dict[str, Any] = {
        "system": cell.system, "router": cell.router, "load": "trace" if cell.rate_rps is None else "poisson",
        "rate_rps": cell.rate_rps, "offered_rps": statistics.median(x.offered_rps for x in loads),
        "offered_rps_windows": [x.offered_rps for x in loads],
        "throughput_tok_s": statistics.median(tputs), "throughput_min_tok_s": min(tputs),
        "throughput_max_tok_s": max(tputs), "repetitions": tputs, **_latencies(cell),
        "num_finished": sum(x.num_finished for x in loads), "num_sent": [x.num_sent for x in loads],
        "arrivals": [x.arrivals for x in loads], "backlog_at_end": [x.num_in_flight_at_end for x in loads],
        "dispatch_lag_mean_s": statistics.mean(x.dispatch_lag_mean_s for x in loads),
        "dispatch_lag_max_s": max(x.dispatch_lag_max_s for x in loads),
        "num_errors": sum(x.num_errors for x in loads), "failures": [f for x in loads for f in x.failures][:5],
        **_models(cell), "threshold_table": cell.threshold_table, "latency_source": cell.latency_source,
        "cpu": cpu_item(cell),
        "memory": cell_memory([window_memory(x.metrics_after, x.metrics_before) for x in loads]),
        "answered": {key: sum(getattr(x, attr) for x in loads) for key, attr in ANSWERED.items()},
        "router_params": cell.router_params, "quality": cell.quality,
    }  # fmt: skip
    for key, sim in (("sim", cell.sim), ("sim_stack", cell.sim_stack)):
        item[key], item[f"measured_over_{key}"] = sim, ratios(item, sim)
    return item


def open_line(cell: OpenCell) -> str:
    """The live display's line for a finished open-loop cell."""
    item = {**_latencies(cell), "num_errors": sum(x.num_errors for x in cell.windows)}
    tputs = [x.throughput_tok_s for x in cell.windows]
    backlog = [x.num_in_flight_at_end for x in cell.windows]
    line = (f"{cell.system:>20} {cell.router:>7} {cell.load_label}: {statistics.median(tputs):7.1f} tok/s "
            f"({min(tputs):.1f}-{max(tputs):.1f}), TTFT p50/p99 {_ms(item['ttft_p50_s'])}/{_ms(item['ttft_p99_s'])} "
            f"ms, backlog {backlog}, errors {item['num_errors']}")  # fmt: skip
    if cell.sim is not None:
        line += (f" | simulator {cell.sim['throughput_tok_s']:.1f} tok/s, TTFT p50/p99 "
                 f"{_ms(cell.sim['ttft_p50_s'])}/{_ms(cell.sim['ttft_p99_s'])} ms")  # fmt: skip
    return line


def _key(item: dict[str, Any]) -> Any:
    return item["rate_rps"]


def markdown(items: Sequence[dict[str, Any]]) -> str:
    """A table per rate (or the trace): measured figures, then measured / simulated for the predicted rows."""
    out = []
    for key in dict.fromkeys(_key(i) for i in items):
        rows = [i for i in items if _key(i) == key]
        title = f"Poisson {key:g} req/s" if key is not None else f"Trace {rows[0]['arrivals'][0]['source']}"
        out += [f"### {title}", "", "| router | system | offered req/s | tok/s median (min-max) | TTFT p50 / p99 ms | "
                "TPOT p50 / p99 ms | e2e p50 / p99 s | backlog at end | dispatch lag mean / max ms | errors | "
                "simulator tok/s |", "|" + "---|" * 11]  # fmt: skip
        out += [_row(r) for r in rows]
        predicted = [r for r in rows if r["measured_over_sim"]]
        if predicted:
            out += ["", "Measured / simulated over the same arrivals (the simulator replays each window's arrival "
                    f"times over its {predicted[0]['sim']['simulated_s']:g} s from empty):", "",
                    "| router | system | offered req/s | tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | "
                    "e2e p50 | e2e p99 | simulator backlog at end |", "|" + "---|" * 11]  # fmt: skip
            out += [_ratio_row(r) for r in predicted]
        out.append("")
    return "\n".join(out)


def _row(r: dict[str, Any]) -> str:
    sim = r["sim"]["throughput_tok_s"] if r["sim"] else None
    return (f"| {r['router']} | {r['system']} | {r['offered_rps']:.2f} | {r['throughput_tok_s']:.1f} "
            f"({r['throughput_min_tok_s']:.1f}-{r['throughput_max_tok_s']:.1f}) | {_ms(r['ttft_p50_s'])} / "
            f"{_ms(r['ttft_p99_s'])} | {_ms(r['tpot_p50_s'])} / {_ms(r['tpot_p99_s'])} | {_s(r['e2e_p50_s'])} / "
            f"{_s(r['e2e_p99_s'])} | {', '.join(map(str, r['backlog_at_end']))} | "
            f"{_ms(r['dispatch_lag_mean_s'])} / {_ms(r['dispatch_lag_max_s'])} | {r['num_errors']} | "
            f"{'-' if sim is None else f'{sim:.1f}'} |")  # fmt: skip


def _ratio_row(r: dict[str, Any]) -> str:
    ratio = r["measured_over_sim"]
    cells = " | ".join("-" if k not in ratio else f"{ratio[k]:.2f}x" for k in FIGURES)
    backlog = ", ".join(map(str, r["sim"]["backlog_at_end"]))
    return f"| {r['router']} | {r['system']} | {r['offered_rps']:.2f} | {cells} | {backlog} |"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.0f}" if v >= 0.01 else f"{1000 * v:.1f}"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def plot(items: Sequence[dict[str, Any]], routers: Sequence[str], path: Path) -> None:
    """Per router: committed tok/s (top) and TTFT p99 (bottom) against the offered rate (measured: the windows'
    median), one line per system; the simulator's figures (over the same arrivals) dashed beside the routed
    systems'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(routers), figsize=(6 * len(routers), 8), squeeze=False)
    for k, router in enumerate(routers):
        top, bottom = axes[0][k], axes[1][k]
        mine = [i for i in items if i["router"] in (router, "none")]
        for system in dict.fromkeys(i["system"] for i in mine):
            rows = sorted((i for i in mine if i["system"] == system), key=lambda i: i["offered_rps"])
            xs = [i["offered_rps"] for i in rows]
            for ax, key, scale in ((top, "throughput_tok_s", 1.0), (bottom, "ttft_p99_s", 1000.0)):
                line = ax.plot(xs, [_scaled(i[key], scale) for i in rows], marker="o", label=system)[0]
                sims = [(i["offered_rps"], _scaled(i["sim"][key], scale)) for i in rows if i["sim"]]  # same arrivals
                if sims:
                    ax.plot(*zip(*sims, strict=True), ls="--", color=line.get_color(), label=f"{system} (simulator)")
        top.set(title=f"router {router}", xlabel="offered rate (req/s)", ylabel="throughput (committed tok/s)")
        bottom.set(xlabel="offered rate (req/s)", ylabel="TTFT p99 from arrival (ms)", yscale="log")
        top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scaled(v: float | None, scale: float) -> float:
    return float("nan") if v is None else v * scale
