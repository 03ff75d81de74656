"""CPU time of a running server's processes and of the load generator, per committed token.

The server's processes are its front end (the ``tokenrouter serve`` process) and every descendant (subservers,
drivers, engine workers); their CPU time is read from ``/proc/<pid>/stat`` (user + system, this process's own
threads, not children it waited for), so sleeping costs nothing. Emulated engines spin for the last fraction
of a millisecond of each step; that CPU is reported by the server (``tokenrouter_emulated_wait_cpu_seconds``) and
left out of the server's budget, as a real engine's forward pass would be. The load generator runs in this
process: its CPU is ``time.process_time()``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trserve.bench.client import committed_tokens, metric_delta

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children of all its threads, recursively)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def role(pid: int) -> str:
    """A short label: the trserve module a worker runs (its worker index appended), else the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return str(pid)
    i = next((k for k, a in enumerate(argv) if a.startswith("trserve.")), None)
    if i is None:
        return Path(argv[0]).name or str(pid)
    index = argv[i + 2] if len(argv) > i + 2 else ""
    module = argv[i].rsplit(".", 1)[-1]
    return f"{module}:{index}" if index.isdecimal() else module


def snapshot(server_pid: int) -> dict[str, Any]:
    """CPU seconds now: per server process (front end first, labelled by role) and of this process."""
    procs = {}
    for pid in [server_pid, *descendants(server_pid)]:
        cpu = process_cpu_s(pid)
        if cpu is not None:
            procs[f"{'frontend' if pid == server_pid else role(pid)}#{pid}"] = cpu
    return {"server": procs, "client_cpu_s": time.process_time()}


def window_cpu(before: dict[str, Any], after: dict[str, Any], metrics_before: str, metrics_after: str,
               num_requests: int) -> dict[str, Any]:  # fmt: skip
    """One window's CPU budget: server CPU (emulated engines' wait spin left out) and load-generator CPU, per
    committed token and per request (``num_requests``: requests finished in the window)."""
    tokens = committed_tokens(metrics_after, metrics_before)
    per_proc = {k: v - before["server"].get(k, 0.0) for k, v in after["server"].items()}
    spin = sum(metric_delta(metrics_after, metrics_before, "tokenrouter_emulated_wait_cpu_seconds_total").values())
    server = sum(per_proc.values()) - spin
    client = after["client_cpu_s"] - before["client_cpu_s"]
    return {
        "tokens": tokens,
        "server_cpu_s": server,
        "emulated_wait_cpu_s": spin,
        "client_cpu_s": client,
        "server_cpu_us_per_token": 1e6 * server / tokens if tokens else None,
        "client_cpu_us_per_token": 1e6 * client / tokens if tokens else None,
        "client_cpu_ms_per_request": 1e3 * client / num_requests if num_requests else None,
        "per_process_cpu_s": per_proc,
    }


def emulation_accuracy(metrics_before: str, metrics_after: str) -> dict[str, dict[str, float]]:
    """Per model: steps, mean emulated vs measured step time (ms), and the host gaps between back-to-back steps
    (their count and their total in ms) over a window (emulated engines only)."""
    given = metric_delta(metrics_after, metrics_before, "tokenrouter_emulated_step_seconds_total")
    measured = metric_delta(metrics_after, metrics_before, "tokenrouter_step_seconds_sum")
    steps = metric_delta(metrics_after, metrics_before, "tokenrouter_steps_total")
    gaps = metric_delta(metrics_after, metrics_before, "tokenrouter_host_gap_seconds_count")
    gap_s = metric_delta(metrics_after, metrics_before, "tokenrouter_host_gap_seconds_sum")
    return {
        m: {
            "steps": steps[m],
            "emulated_ms": 1e3 * given[m] / steps[m],
            "measured_ms": 1e3 * measured[m] / steps[m],
            "host_gaps": gaps.get(m, 0.0),
            "host_gap_total_ms": 1e3 * gap_s.get(m, 0.0),
        }
        for m in given
        if steps.get(m)
    }


def cell_summary(windows: Sequence[dict[str, Any]], accuracy: Sequence[dict[str, dict[str, float]]]) -> dict:
    """Pooled over a cell's repetitions: CPU per token and request, and emulated vs measured step times."""
    tokens = sum(w["tokens"] for w in windows)
    server, client = sum(w["server_cpu_s"] for w in windows), sum(w["client_cpu_s"] for w in windows)
    models: dict[str, dict[str, float]] = {}
    for acc in accuracy:
        for m, a in acc.items():
            cur = models.setdefault(m, dict.fromkeys(("steps", "emulated_s", "measured_s", "gaps", "gap_s"), 0.0))
            cur["steps"] += a["steps"]
            cur["emulated_s"] += a["emulated_ms"] * a["steps"] / 1e3
            cur["measured_s"] += a["measured_ms"] * a["steps"] / 1e3
            cur["gaps"] += a["host_gaps"]
            cur["gap_s"] += a["host_gap_total_ms"] / 1e3
    steps = {m: {"steps": v["steps"], "emulated_ms": 1e3 * v["emulated_s"] / v["steps"],
                 "measured_ms": 1e3 * v["measured_s"] / v["steps"], "host_gaps": v["gaps"],
                 "mean_host_gap_ms": 1e3 * v["gap_s"] / v["gaps"] if v["gaps"] else None}
             for m, v in models.items()}  # fmt: skip
    return {
        "server_cpu_us_per_token": 1e6 * server / tokens if tokens else None,
        "client_cpu_us_per_token": 1e6 * client / tokens if tokens else None,
        "windows": list(windows),
        "emulated_step_ms": steps,
    }
