"""The table, targets and plot of ``benchmarks/kv_emulated.py``'s JSON: per (routing, N, memory) each system's
throughput, its ratio to the simulator's prediction, failed requests, answers identical to the roomy run's, and the
memory events; the targets (the default policy at least as fast as the better of ``lru`` and ``admission-limit``
in every oversubscribed cell; the simulator within 5% of every cell) as met or not.

    python benchmarks/kv_emulated_report.py [docs/bench-emulated/memory/kv-emulated.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trserve.bench.kv_grid import answers_match

SIM_TOLERANCE = 0.05


def _reference(cells: list[dict[str, Any]], cell: dict[str, Any]) -> dict[str, Any] | None:
    """The roomy run whose answers ``cell`` is compared with: the same routing and N, ``llm-only`` with
    ``llm-only``, every routed policy with the roomy ``cost`` run."""
    family = "llm-only" if cell["system"] == "llm-only" else "cost"
    for c in cells:
        if (c["routing"], c["concurrency"], c["memory"], c["system"]) == (cell["routing"], cell["concurrency"], "roomy",
                                                                           family):  # fmt: skip
            return c
    return None


def summarize(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cell, ordered by routing, N, memory, system."""
    cells = doc["cells"]
    order = {"roomy": 0, "2x": 1, "4x": 2}
    systems = {"cost": 0, "lru": 1, "admission-limit": 2, "llm-only": 3}
    rows = []
    for c in sorted(cells, key=lambda c: (c["routing"], c["concurrency"], order[c["memory"]], systems[c["system"]])):
        ref = _reference(cells, c)
        kv = c.get("kv") or {}
        rows.append({
            "routing": c["routing"], "N": c["concurrency"], "memory": c["memory"], "kv_tokens": c["kv_tokens"],
            "system": c["system"], "tok_s": round(c["throughput_tok_s"], 1),
            "sim_tok_s": round(c["sim_tok_s"], 1) if c.get("sim_tok_s") else None,
            "vs_sim": round(c["throughput_tok_s"] / c["sim_tok_s"], 3) if c.get("sim_tok_s") else None,
            "failed": c["num_failed"], "answers": answers_match(c["answers"], ref["answers"]) if ref else None,
            "spilled": sum(m["spilled"] for m in kv.values()), "preempted": sum(m["preempted"] for m in kv.values()),
            "recomputed_tokens": sum(m["recomputed_tokens"] for m in kv.values()),
            "admission_waits": sum(m["admission_waits"] for m in kv.values()),
        })  # fmt: skip
    return rows


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target per cell and overall (met only when every cell meets it)."""
    by = {(r["routing"], r["N"], r["memory"], r["system"]): r for r in rows}
    default = []
    for (routing, n, memory, system), r in sorted(by.items()):
        others = [by.get((routing, n, memory, s)) for s in ("lru", "admission-limit")]
        if system != "cost" or memory == "roomy" or not all(others):
            continue
        best = max(o["tok_s"] for o in others if o)
        default.append({"routing": routing, "N": n, "memory": memory, "cost": r["tok_s"], "best_simple": best,
                        "ratio": round(r["tok_s"] / best, 3), "met": r["tok_s"] >= best})  # fmt: skip
    sim = [r for r in rows if r["vs_sim"] is not None]
    off = [r for r in sim if abs(r["vs_sim"] - 1) > SIM_TOLERANCE]
    answers = [r["answers"] for r in rows if r["answers"]]
    return {
        "default_at_least_best_simple": {"met": all(d["met"] for d in default), "cells": default},
        "sim_within_5pct": {"met": bool(sim) and not off, "cells": len(sim), "off": len(off),
                            "worst": max((abs(r["vs_sim"] - 1) for r in sim), default=None)},
        "zero_failed": {"met": all(r["failed"] == 0 for r in rows), "failed": sum(r["failed"] for r in rows)},
        "answers_identical_to_roomy": {"met": all(a["identical"] == a["compared"] for a in answers),
                                       "compared": sum(a["compared"] for a in answers),
                                       "identical": sum(a["identical"] for a in answers)},
    }  # fmt: skip


def markdown(rows: list[dict[str, Any]], goals: dict[str, Any]) -> str:
    head = ("| routing | N | memory | KV tokens | system | tok/s | sim tok/s | / sim | failed | identical / compared "
            "| spilled | preempted | recomputed | admission waits |")  # fmt: skip
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        a = r["answers"]
        same = f"{a['identical']} / {a['compared']}" if a else "-"
        r = {**r, "sim_tok_s": r["sim_tok_s"] or "-", "vs_sim": r["vs_sim"] or "-"}
        lines.append(f"| {r['routing']} | {r['N']} | {r['memory']} | {r['kv_tokens']:,} | {r['system']} | {r['tok_s']} "
                     f"| {r['sim_tok_s']} | {r['vs_sim']} | {r['failed']} | {same} | {r['spilled']} | {r['preempted']} "
                     f"| {r['recomputed_tokens']} | {r['admission_waits']} |")  # fmt: skip
    lines += ["", "Targets:", ""]
    for name, goal in goals.items():
        detail = {k: v for k, v in goal.items() if k not in ("met", "cells") or not isinstance(v, list)}
        lines.append(f"* `{name}`: {'met' if goal['met'] else 'NOT met'} {json.dumps(detail)}")
    for d in goals["default_at_least_best_simple"]["cells"]:
        lines.append(f"  * {d['routing']} N = {d['N']} {d['memory']}: cost {d['cost']} vs {d['best_simple']} "
                     f"({d['ratio']}x) {'met' if d['met'] else 'missed'}")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routings = sorted({r["routing"] for r in rows})
    memories = [m for m in ("roomy", "2x", "4x") if any(r["memory"] == m for r in rows)]
    fig, axes = plt.subplots(len(routings), len(memories), figsize=(4.2 * len(memories), 3.4 * len(routings)),
                             squeeze=False, sharey="row")  # fmt: skip
    for i, routing in enumerate(routings):
        for j, memory in enumerate(memories):
            ax = axes[i][j]
            for system in ("cost", "lru", "admission-limit", "llm-only"):
                pts = sorted((r["N"], r["tok_s"], r["sim_tok_s"]) for r in rows
                             if (r["routing"], r["memory"], r["system"]) == (routing, memory, system))  # fmt: skip
                if pts:
                    line = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=system)[0]
                    ax.plot([p[0] for p in pts], [p[2] for p in pts], "x--", color=line.get_color(), alpha=0.6)
            ax.set_title(f"{routing}, {memory}", fontsize=9)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("N")
            if j == 0:
                ax.set_ylabel("tok/s (o measured, x simulator)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(doc: dict[str, Any], out: Path) -> None:
    """``summary`` and ``targets`` into the JSON at ``out`` (when it exists), and the table and plot beside it
    (``kv-emulated.json``: ``kv-emulated.md`` and ``kv-emulated.png``)."""
    rows = summarize(doc)
    goals = targets(rows)
    out.with_suffix(".md").write_text(markdown(rows, goals))
    plot(rows, out.with_suffix(".png"))
    if out.exists():
        full = json.loads(out.read_text())
        full["summary"], full["targets"] = rows, goals
        out.write_text(json.dumps(full, indent=1) + "\n")


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench-emulated/memory/kv-emulated.json")
    write_report(json.loads(source.read_text()), source)
