"""Fidelity beyond throughput: the simulator against the real server on request latencies (TTFT, TPOT, end to
end; p50 and p99), per-model batch-size distributions (total-variation distance of the histograms), hand-offs
per committed token and the share of request-steps run off the entry model (the large model's share).

Both sides are computed the same way: TTFT = first token - submission, TPOT = (done - first token) / (tokens - 1)
over requests with more than one token, e2e = done - submission; real over the finished full-length requests of
the scored repeats, simulated over the simulator's finished requests.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trserve.crossval.harness import CellRun, StepRecord
from trserve.runtime.reports import MEMORY_EVENTS
from trsim import breakdown
from trsim.metrics import SimResult

#: ``summary[router]["latency"]`` keys; ``<name>_p<q>`` with ``e2e`` the simulator's ``latency``.
LATENCY_METRICS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99")


def _pct(values: Sequence[float], q: int) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def real_fidelity(runs: Sequence[CellRun], num_models: int, entry_model: int) -> dict[str, Any]:
    """The real side of one cell, pooled over ``runs`` (its scored repeats)."""
    rows = [row for run in runs for row in run.latencies]
    ttft = [first - sub for sub, first, _, _ in rows]
    e2e = [done - sub for sub, _, done, _ in rows]
    tpot = [(done - first) / (n - 1) for _, first, done, n in rows if n > 1]
    steps = [s for run in runs for s in run.steps]
    histograms = [dict(sorted(Counter(s.batch_size for s in steps if s.model == m).items())) for m in range(num_models)]
    tokens = sum(run.num_tokens for run in runs)
    out: dict[str, Any] = {"num_requests": len(rows)}
    for q in (50, 99):
        out |= {f"ttft_p{q}": _pct(ttft, q), f"tpot_p{q}": _pct(tpot, q), f"e2e_p{q}": _pct(e2e, q)}
    out["batch_histograms"] = histograms
    out["handoffs_per_token"] = sum(s.num_handoffs for s in steps) / tokens if tokens else 0.0
    out["llm_step_share"] = off_entry_share([sum(k * v for k, v in h.items()) for h in histograms], entry_model)
    out["breakdown"] = breakdown.summarize([b for run in runs for b in run.breakdowns], num_models)
    return out


def sim_fidelity(result: SimResult, entry_model: int) -> dict[str, Any]:
    """The same quantities from one simulator run."""
    out: dict[str, Any] = {"num_requests": result.num_finished}
    for q in (50, 99):
        out |= {
            f"ttft_p{q}": getattr(result, f"ttft_p{q}_s"),
            f"tpot_p{q}": getattr(result, f"tpot_p{q}_s"),
            f"e2e_p{q}": getattr(result, f"latency_p{q}_s"),
        }
    out["batch_histograms"] = [dict(m.batch_histogram) for m in result.models]
    out["handoffs_per_token"] = result.handoffs_per_token
    out["llm_step_share"] = off_entry_share([m.request_steps for m in result.models], entry_model)
    out["breakdown"] = (result.extra or {}).get("breakdown", {"num_requests": 0})
    return out


def off_entry_share(request_steps: Sequence[int], entry_model: int) -> float:
    """Share of request-steps (tokens sampled) run on models other than the entry model."""
    total = sum(request_steps)
    return (total - request_steps[entry_model]) / total if total else 0.0


def histogram_distance(a: Mapping[Any, int], b: Mapping[Any, int]) -> float | None:
    """Total-variation distance between two batch-size histograms (0 = the same distribution, 1 = disjoint); keys
    may be batch sizes or their strings (a histogram read back from JSON)."""
    a, b = ({int(k): v for k, v in h.items()} for h in (a, b))
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        return None
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in keys)


def compare(real: Mapping[str, Any], sim: Mapping[str, Any]) -> dict[str, Any]:
    """Per latency metric the simulator's relative error, the histogram distance per model, the hand-off rate's
    relative error and the difference in the large model's step share (simulated - real)."""
    errors: dict[str, float | None] = {}
    for key in LATENCY_METRICS:
        r, s = real.get(key), sim.get(key)
        errors[key] = abs(s - r) / r if r and s is not None else None
    pairs = zip(real["batch_histograms"], sim["batch_histograms"], strict=True)
    rate_real = real["handoffs_per_token"]
    return {
        "latency_rel_error": errors,
        "batch_histogram_distance": [histogram_distance(r, s) for r, s in pairs],
        "handoff_rel_error": abs(sim["handoffs_per_token"] - rate_real) / rate_real if rate_real else None,
        "llm_step_share_diff": sim["llm_step_share"] - real["llm_step_share"],
        "breakdown_diff_ms": breakdown.compare(real.get("breakdown", {}), sim.get("breakdown", {})),
    }


def _stats(values: Sequence[float | None], prefix: str) -> dict[str, float | None]:
    present = [v for v in values if v is not None]
    return {
        f"{prefix}median_rel_error": statistics.median(present) if present else None,
        f"{prefix}max_rel_error": max(present) if present else None,
        "num_cells": len(present),
    }


def summarize_fidelity(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per router: ``latency[metric]`` with ``sim_median_rel_error`` / ``sim_max_rel_error`` over its cells,
    the median and max histogram distance per model, the hand-off rate's median / max relative error and the
    median / max absolute difference in the large model's step share."""
    out: dict[str, Any] = {}
    for router in dict.fromkeys(c["router"] for c in cells):
        fid = [c["fidelity"]["sim_vs_real"] for c in cells if c["router"] == router]
        latency = {k: _stats([f["latency_rel_error"][k] for f in fid], "sim_") for k in LATENCY_METRICS}
        num_models = len(fid[0]["batch_histogram_distance"])
        dists = [[f["batch_histogram_distance"][m] for f in fid] for m in range(num_models)]
        dists = [[d for d in ds if d is not None] for ds in dists]
        shares = [abs(f["llm_step_share_diff"]) for f in fid]
        out[router] = {
            "latency": latency,
            "batch_histogram_distance": {
                "median": [statistics.median(d) if d else None for d in dists],
                "max": [max(d) if d else None for d in dists],
            },
            "handoffs_per_token": _stats([f["handoff_rel_error"] for f in fid], "sim_"),
            "llm_step_share_abs_diff": {"median": statistics.median(shares), "max": max(shares)},
        }
    return out


def step_breakdown(steps: Sequence[StepRecord], num_models: int, measure_s: float) -> list[dict[str, float]]:
    """Per model: steps, mean batch, mean engine step time, busy fraction in the window, the hand-off messages
    it received with their mean transit (ms), and the median host gap between steps (ms)."""
    out = []
    for m in range(num_models):
        mine = [s for s in steps if s.model == m]
        received = sum(s.handoffs_received for s in mine)
        gaps = [s.host_gap_s for s in mine if s.host_gap_s is not None]
        out.append(
            {
                "num_steps": len(mine),
                "mean_batch": statistics.fmean(s.batch_size for s in mine) if mine else 0.0,
                "mean_step_s": statistics.fmean(s.step_s for s in mine) if mine else 0.0,
                "busy_fraction": sum(s.step_s for s in mine) / measure_s if measure_s else 0.0,
                "handoffs_received": received,
                "handoff_transit_ms": 1e3 * sum(s.handoff_transit_s for s in mine) / received if received else None,
                "handoffs_late_share": sum(s.handoffs_late for s in mine) / received if received else None,
                "host_gap_median_ms": 1e3 * statistics.median(gaps) if gaps else None,
            }
        )
    return out


def memory_events(runs: Sequence[Sequence[StepRecord]], num_models: int) -> list[dict[str, int]] | None:
    """Per model, the memory events inside the windows of ``runs`` (each a window's steps in order): the counters'
    growth from each window's first step of the model to its last, summed; None without KV accounting."""
    if not any(s.memory for steps in runs for s in steps):
        return None
    out = []
    for m in range(num_models):
        totals = dict.fromkeys(MEMORY_EVENTS, 0)
        for steps in runs:
            mine = [s.memory for s in steps if s.model == m and s.memory]
            for event in MEMORY_EVENTS if mine else ():
                totals[event] += mine[-1][event] - mine[0][event]
        out.append(totals)
    return out
