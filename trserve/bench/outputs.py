"""Writing one bench run: ``bench.json`` (settings, machine load, the drift probe, ``runs``, targets),
``bench.md`` (the drift probe's line, tables) and ``bench.png``; and the issue's targets, computed from the runs
at the target concurrency. An open-loop bench writes ``open_runs`` instead (:func:`write_open_outputs`)."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trserve import eventloop
from trserve.bench.matched import matched_rows, matched_table
from trserve.bench.open_report import markdown as open_markdown
from trserve.bench.open_report import open_item
from trserve.bench.open_report import plot as open_plot
from trserve.bench.report import lookup, markdown_table, plot, run_item, speedup_table

TARGET_N = 8


def targets(runs: Sequence[dict[str, Any]], routers: Sequence[str], direct: dict[str, Any] | None) -> dict[str, Any]:
    """The issue's targets at N = 8 per router (ratios of medians), and the overhead budget (``llm-only`` against
    plain vLLM at the concurrency the direct run used)."""
    out: dict[str, Any] = {}
    for router in routers:
        tr = lookup(runs, "tokenrouter", router, TARGET_N)
        if tr is None:
            continue
        t: dict[str, Any] = {}
        for name in ("lockstep", "per-token"):
            if (base := lookup(runs, name, router, TARGET_N)) and base["throughput_tok_s"]:
                t[f"speedup_vs_{name}"] = tr["throughput_tok_s"] / base["throughput_tok_s"]
        for kind in ("model", "sim"):
            pred = tr.get(f"predicted_{kind}_tok_s")
            if pred:
                t[f"measured_over_predicted_{kind}"] = tr["throughput_tok_s"] / pred
        b1 = lookup(runs, "tokenrouter-b1", router, TARGET_N)
        for system in ("tokenrouter", "tokenrouter-bstar"):
            t.update(
                _gain_over_b1(lookup(runs, system, router, TARGET_N), b1, "" if system == "tokenrouter" else "bstar_")
            )
        out[router] = t
    n_direct = direct["concurrency"] if direct else None
    llm = next((r for r in runs if r["system"] == "llm-only" and r["concurrency"] == n_direct), None)
    if direct and llm:
        out["overhead"] = {
            "llm_only_tok_s": llm["throughput_tok_s"],
            "vllm_direct_tok_s": direct["throughput_tok_s"],
            "ratio": llm["throughput_tok_s"] / direct["throughput_tok_s"],
            "concurrency": n_direct,
        }
    return out


def _gain_over_b1(run: dict[str, Any] | None, b1: dict[str, Any] | None, prefix: str) -> dict[str, Any]:
    """Measured and predicted gain of a delayed-batching run over B = 1; a run at B = 1 itself compares 0 with
    0, which is reported as not exercised rather than as a met target."""
    if not (run and b1 and b1["throughput_tok_s"]):
        return {}
    if run.get("thresholds") and max(run["thresholds"]) == 1:
        return {f"{prefix}delayed_batching": "not exercised (B = 1 at this concurrency)"}
    out: dict[str, Any] = {f"{prefix}thresholds": run.get("thresholds")}
    out[f"{prefix}gain_over_b1_measured"] = run["throughput_tok_s"] / b1["throughput_tok_s"] - 1
    if run.get("predicted_model_tok_s") and b1.get("predicted_model_tok_s"):
        out[f"{prefix}gain_over_b1_predicted"] = run["predicted_model_tok_s"] / b1["predicted_model_tok_s"] - 1
    out["b1_relative_spread"] = (b1["throughput_max_tok_s"] - b1["throughput_min_tok_s"]) / b1["throughput_tok_s"]
    return out


def routing_item(state: Any, min_gain: float) -> dict[str, Any]:
    """What one router's b1 runs taught (P, C, latencies) and the thresholds chosen from it."""
    return {
        "P": state.P,
        "C": state.C,
        "latency_source": state.latency_source,
        "optimized_thresholds": state.optimized,
        "min_gain": min_gain,
        "best_without_min_gain": state.unconstrained,
        "predicted_gain_without_min_gain": state.unconstrained_gain,
    }


def config_path(doc: dict[str, Any]) -> Path:
    """The serve config a written bench document ran: its command's ``--config`` argument."""
    words = doc["command"].split()
    return Path(words[words.index("--config") + 1])


def write_outputs(
    out_dir: Path, plan: Any, runner: Any, command: str, load: dict[str, float], elapsed_s: float
) -> dict[str, Any]:
    """Write the three files; returns the JSON document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if plan.open is not None:
        return write_open_outputs(out_dir, plan, runner, command, load, elapsed_s)
    runs = [run_item(c) for c in runner.cells]
    routers, ns = list(plan.routers), list(plan.concurrencies)
    doc = {
        **_head(command, load, elapsed_s),
        "settings": {
            "systems": list(plan.systems),
            "routers": routers,
            "concurrencies": ns,
            **_work(plan),
            "load_generator": "trserve.bench.stream: one keep-alive HTTP/1.1 connection per client, in the bench "
            "process; only each answer's usage chunk is parsed",
        },
        "drift": plan.drift.to_dict(),
        "stack": plan.stack.to_dict() if plan.stack is not None else None,
        "routing": {r: routing_item(s, plan.min_gain) for r, s in runner.routers.items()},
        "runs": runs,
        "vllm_direct": runner.direct,
        "vllm_server": runner.external.get("vllm-server"),
        "matched_quality": matched_rows(runs),
        "targets": targets(runs, routers, runner.direct),
    }
    (out_dir / "bench.json").write_text(json.dumps(doc, indent=2) + "\n")
    tables = [markdown_table(runs, routers, ns), speedup_table(runs, routers, ns)]
    md = [f"Command: `{command}`", "", plan.drift.line(), "", *tables]
    if doc["matched_quality"]:
        md += ["Throughput at matched quality (quality from models/local-smollm2/operating_points.json):", "",
               matched_table(doc["matched_quality"])]  # fmt: skip
    (out_dir / "bench.md").write_text("\n".join(md))
    plot(runs, routers, ns, out_dir / "bench.png")
    return doc


def _head(command: str, load: dict[str, float], elapsed_s: float) -> dict[str, Any]:
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), **load}
    return {"command": command, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine,
            "elapsed_s": elapsed_s}  # fmt: skip


def _work(plan: Any) -> dict[str, Any]:
    """The settings of what each request asks and of the windows."""
    work = plan.workload
    return {"repetitions": plan.repetitions, "max_tokens": work.max_tokens,
            "lengths": work.lengths.to_dict() if work.lengths is not None else None, "warmup_s": work.warmup_s,
            "window_s": work.window_s, "event_loop": eventloop.loop_name()}  # fmt: skip


def write_open_outputs(
    out_dir: Path, plan: Any, runner: Any, command: str, load: dict[str, float], elapsed_s: float
) -> dict[str, Any]:
    """An open-loop bench's files: ``bench.json`` with ``open_runs`` (``trserve.bench.open_report``) in place of the
    closed loop's ``runs``, ``bench.md`` with a table per rate, and ``bench.png``."""
    items = [open_item(c) for c in runner.cells]
    doc = {
        **_head(command, load, elapsed_s),
        "settings": {"systems": list(plan.systems), "routers": list(plan.routers), "load": plan.open.to_dict(),
                     "threshold_table_concurrencies": list(plan.concurrencies), **_work(plan),
                     "load_generator": "trserve.bench.open_loop: each request sent at its arrival time on an idle "
                     "keep-alive connection of a pool, in the bench process; latencies from the arrival time"},
        "drift": plan.drift.to_dict(),
        "stack": plan.stack.to_dict() if plan.stack is not None else None,
        "routing": {r: routing_item(s, plan.min_gain) for r, s in runner.routers.items()},
        "open_runs": items,
        "vllm_server": runner.external.get("vllm-server"),
    }  # fmt: skip
    (out_dir / "bench.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"Command: `{command}`", "", plan.drift.line(), "", open_markdown(items)]
    (out_dir / "bench.md").write_text("\n".join(md))
    open_plot(items, list(plan.routers), out_dir / "bench.png")
    return doc
