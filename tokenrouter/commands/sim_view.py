"""`tokenrouter simulate`'s table of one run, and its trace files."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def print_summary(summary: dict[str, Any], names: tuple[str, ...]) -> None:
    """The run's summary (``simulate``'s JSON object) as a table: throughput, latency, models, KV, phases."""
    from rich.console import Console
    from rich.table import Table

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:.1f}"

    n = summary["concurrency"] if summary["concurrency"] is not None or not summary.get("phases") else "per phase"
    ran = f" runs as {summary['applied']}" if summary["applied"] != summary["thresholds"] else ""
    table = Table(title=f"simulate ({summary['baseline']}, N={n}, B={summary['thresholds']}{ran})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("throughput (committed tok/s)", f"{summary['throughput_tok_s']:.1f}")
    table.add_row("committed tokens", str(summary["committed_tokens"]))
    table.add_row("simulated s / wall s", f"{summary['simulated_s']:.2f} / {summary['wall_s']:.2f}")
    table.add_row("finished requests", str(summary["num_finished"]))
    for key in ("latency", "ttft", "tpot"):
        table.add_row(f"{key} p50/p90/p99 (ms)", " / ".join(ms(summary[f"{key}_p{q}_s"]) for q in (50, 90, 99)))
    table.add_row("hand-offs per token", f"{summary['handoffs_per_token']:.3f}")
    for name, model in zip(names, summary["models"], strict=True):
        table.add_row(f"{name}: busy / mean batch", f"{model['busy_fraction']:.2f} / {model['mean_batch']:.2f}")
    kv = summary.get("extra", {}).get("kv")
    if kv is not None:
        table.add_row(f"KV ({kv['spill']}): requests failed", str(kv["num_failed"]))
        for m in kv["models"]:
            name = m["model"] + (f"-r{m['replica']}" if "replica" in m else "")
            table.add_row(f"{name}: KV peak / capacity (tokens)", f"{m['peak_used_blocks'] * m['block_size']} / "
                          f"{m['capacity_tokens']}")  # fmt: skip
            table.add_row(f"{name}: spilled / preempted / recomputed tok", f"{m['num_spilled']} / "
                          f"{m['num_preempted']} / {m['num_recomputed_tokens']}")  # fmt: skip
    for phase in summary.get("phases", []):
        label = f"phase {phase['index']} ({phase['start_s']:.0f}-{phase['end_s']:.0f} s)"
        n = f", N={phase['concurrency']}" if phase["concurrency"] is not None else ""
        ran = f" (runs as {phase['applied']})" if phase["applied"] != phase["thresholds"] else ""
        table.add_row(label, f"{phase['throughput_tok_s']:.1f} tok/s, B={phase['thresholds']}{ran}{n}")
    for switch in summary.get("switches", []):
        gain = f"{switch['predicted_gain']:+.1%}"
        table.add_row(f"switch at {switch['time_s']:.1f} s", f"{switch['old']} -> {switch['new']} ({gain} predicted)")
    Console().print(table)


def write_outputs(sim: Any, chrome_trace: Path | None, trace_out: Path | None) -> None:
    """Write the run's steps as Chrome-trace JSON and its per-request routing traces (JSONL), where asked."""
    from trcore.traces import traces_from_events
    from trsim.chrome import write_chrome_trace
    from trsim.tracefile import write_traces

    if chrome_trace is not None:
        write_chrome_trace(chrome_trace, sim.steps, sim.config.names)
    if trace_out is not None:
        events = [e for sub in sim.subservers for e in (sub.trace or [])]
        write_traces(trace_out, traces_from_events(events))
