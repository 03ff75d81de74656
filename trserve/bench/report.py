"""Bench outputs: the JSON document (a ``runs`` list, one item per system x router x concurrency), a markdown
table, and a PNG (throughput vs N per system; speed-up of TokenRouter over the best baseline)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trserve.bench import cpu
from trserve.bench.memory import cell_memory, window_memory
from trserve.bench.systems import SINGLE_MODEL

BASELINES = ("lockstep", "per-token", "llm-only", "vllm-server")


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _large_fraction(stats: Sequence[Any]) -> float:
    """Share of committed tokens written by the large (last) model."""
    total = sum(s.tokens for s in stats)
    return stats[-1].tokens / total if total else 0.0


#: A run's ``answered`` totals (whole runs, warm-up included): key -> LoadResult attribute.
ANSWERED = {"requests": "num_answered", "tokens": "answered_tokens", "asked_tokens": "asked_tokens"}


def run_item(cell: Any) -> dict[str, Any]:
    """One ``runs`` entry: medians over the repetitions; latencies pooled over the finished requests."""
    tputs = [x.throughput_tok_s for x in cell.loads]
    fractions = [_large_fraction(s) if len(s) > 1 else 1.0 for s in cell.stats]
    ttft = [v for x in cell.loads for v in x.ttft_s]
    tpot = [v for x in cell.loads for v in x.tpot_s]
    e2e = [v for x in cell.loads for v in x.e2e_s]
    num_models = len(cell.stats[0])
    return {
        "system": cell.system, "router": cell.router, "concurrency": cell.concurrency,
        "throughput_tok_s": statistics.median(tputs), "throughput_min_tok_s": min(tputs),
        "throughput_max_tok_s": max(tputs), "repetitions": tputs,
        "llm_token_fraction": statistics.median(fractions),
        "ttft_p50_s": _pct(ttft, 50), "tpot_p50_s": _pct(tpot, 50),
        "e2e_p50_s": _pct(e2e, 50), "e2e_p99_s": _pct(e2e, 99),
        "num_finished": sum(x.num_finished for x in cell.loads),
        "mean_batch": [statistics.mean(s[m].mean_batch for s in cell.stats) for m in range(num_models)],
        "mean_step_ms": [1000 * statistics.mean(s[m].mean_step_s for s in cell.stats) for m in range(num_models)],
        "thresholds": cell.thresholds,
        "predicted_model_tok_s": cell.predicted_model, "predicted_sim_tok_s": cell.predicted_sim,
        "predicted_sim_stack_tok_s": cell.predicted_sim_stack, "predicted_sim_inputs": cell.sim_inputs,
        "latency_source": cell.latency_source,
        "predicted_model_own_steps_tok_s": cell.predicted_own_steps,
        "predicted_model_own_routing_tok_s": cell.predicted_own_routing,
        "busy_fraction": [statistics.mean(s[m].step_seconds / x.window_s for s, x in zip(cell.stats, cell.loads,
                                                                                          strict=True))
                          for m in range(num_models)],
        "cpu": cpu_item(cell),
        "memory": cell_memory([window_memory(x.metrics_after, x.metrics_before) for x in cell.loads]),
        "num_failed": sum(x.num_failed for x in cell.loads),
        "answered": {key: sum(getattr(x, attr) for x in cell.loads) for key, attr in ANSWERED.items()},
        "router_params": cell.router_params,
        "quality": cell.quality,
    }  # fmt: skip


def cpu_item(cell: Any) -> dict[str, Any] | None:
    """CPU per committed token (server processes, load generator) and emulated vs measured step times."""
    loads = [x for x in cell.loads if x.probe_before and x.probe_after]
    if not loads:
        return None
    windows = [cpu.window_cpu(x.probe_before, x.probe_after, x.metrics_before, x.metrics_after, x.num_finished)
               for x in loads]  # fmt: skip
    return cpu.cell_summary(windows, [cpu.emulation_accuracy(x.metrics_before, x.metrics_after) for x in loads])


def lookup(runs: Sequence[dict[str, Any]], system: str, router: str, n: int) -> dict[str, Any] | None:
    for r in runs:
        if r["system"] == system and r["concurrency"] == n and (r["router"] == router or system in SINGLE_MODEL):
            return r
    return None


def best_baseline(runs: Sequence[dict[str, Any]], router: str, n: int) -> tuple[str, float] | None:
    found = [(s, r["throughput_tok_s"]) for s in BASELINES if (r := lookup(runs, s, router, n))]
    return max(found, key=lambda x: x[1]) if found else None


def markdown_table(runs: Sequence[dict[str, Any]], routers: Sequence[str], concurrencies: Sequence[int]) -> str:
    """Throughput (median, min-max) with predictions, large-model fraction and latencies; speed-up rows."""
    head = ("| router | system | N | tok/s median (min-max) | predicted model / sim | prediction inputs | "
            "LLM tokens | TTFT p50 ms | TPOT p50 ms | e2e p50 / p99 s |")  # fmt: skip
    lines = [head, "|" + "---|" * 10]
    for router in routers:
        for r in runs:
            if r["router"] not in (router, "none") or (r["router"] == "none" and router != routers[0]):
                continue
            pred = f"{_tok(r['predicted_model_tok_s'])} / {_tok(r['predicted_sim_tok_s'])}"
            if r.get("predicted_sim_stack_tok_s") is not None:
                pred += f" ({_tok(r['predicted_sim_stack_tok_s'])} with stack costs)"
            lines.append(
                f"| {r['router']} | {r['system']} | {r['concurrency']} | {r['throughput_tok_s']:.1f} "
                f"({r['throughput_min_tok_s']:.1f}-{r['throughput_max_tok_s']:.1f}) | {pred} | "
                f"{_source(r['latency_source'])} | "
                f"{100 * r['llm_token_fraction']:.0f}% | {_ms(r['ttft_p50_s'])} | {_ms(r['tpot_p50_s'])} | "
                f"{_s(r['e2e_p50_s'])} / {_s(r['e2e_p99_s'])} |"
            )
    return "\n".join(lines) + "\n"


def speedup_table(runs: Sequence[dict[str, Any]], routers: Sequence[str], concurrencies: Sequence[int]) -> str:
    """TokenRouter over lockstep, per-token and the best baseline, per router and N."""
    lines = ["| router | N | vs lockstep | vs per-token | vs best baseline | vs B=1 |", "|---|---|---|---|---|---|"]
    for router in routers:
        for n in concurrencies:
            tr = lookup(runs, "tokenrouter", router, n)
            if tr is None:
                continue
            best = best_baseline(runs, router, n)
            cells = [_ratio(tr, lookup(runs, s, router, n)) for s in ("lockstep", "per-token")]
            best_txt = f"{tr['throughput_tok_s'] / best[1]:.2f}x ({best[0]})" if best else "-"
            lines.append(f"| {router} | {n} | {cells[0]} | {cells[1]} | {best_txt} | "
                         f"{_ratio(tr, lookup(runs, 'tokenrouter-b1', router, n))} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _ratio(a: dict[str, Any], b: dict[str, Any] | None) -> str:
    return f"{a['throughput_tok_s'] / b['throughput_tok_s']:.2f}x" if b and b["throughput_tok_s"] else "-"


def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _source(text: str) -> str:
    """Where a row's predicted latencies came from, in a few words: a profile, this run (in-sample) or none."""
    if text.startswith("calibration profile"):
        return "profile " + text[text.find("(") + 1 : text.find(")")]
    return "this run (in-sample)" if "this run" in text else "-"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.0f}"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def plot(runs: Sequence[dict[str, Any]], routers: Sequence[str], concurrencies: Sequence[int], path: Path) -> None:
    """Per router: throughput vs N per system (top) and TokenRouter's speed-up over the best baseline (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(routers), figsize=(6 * len(routers), 8), squeeze=False)
    systems = sorted({r["system"] for r in runs}, key=lambda s: s != "tokenrouter")
    for k, router in enumerate(routers):
        top, bottom = axes[0][k], axes[1][k]
        for system in systems:
            pts = [(n, r) for n in concurrencies if (r := lookup(runs, system, router, n))]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            med = np.array([r["throughput_tok_s"] for _, r in pts])
            err = np.array(
                [
                    [m - r["throughput_min_tok_s"], r["throughput_max_tok_s"] - m]
                    for m, (_, r) in zip(med, pts, strict=True)
                ]
            ).T
            top.errorbar(
                xs, med, yerr=err, marker="o", capsize=3, label=system, lw=2.5 if system == "tokenrouter" else 1.2
            )
        top.set(
            title=f"router {router}",
            xlabel="concurrent requests N",
            ylabel="throughput (tok/s)",
            xscale="log",
            xticks=list(concurrencies),
        )
        top.set_xticklabels([str(n) for n in concurrencies])
        top.legend(fontsize=8)
        ratios = []
        for n in concurrencies:
            tr, best = lookup(runs, "tokenrouter", router, n), best_baseline(runs, router, n)
            if tr and best:
                ratios.append((n, tr["throughput_tok_s"] / best[1], best[0]))
        bottom.bar([str(n) for n, _, _ in ratios], [v for _, v, _ in ratios], color="tab:blue")
        for i, (_, v, name) in enumerate(ratios):
            bottom.text(i, v, f"{v:.2f}x\n{name}", ha="center", va="bottom", fontsize=8)
        bottom.axhline(1.0, color="gray", lw=0.8)
        bottom.set(xlabel="concurrent requests N", ylabel="TokenRouter / best baseline")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
