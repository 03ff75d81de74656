"""Where the real stack loses against the simulator in a cross-validation run: per cell, the measured/simulated
throughput beside the per-request times (TTFT, TPOT, end to end) and each model's step time over its profile,
busy fraction and mean batch, real against simulated, and the hand-offs each model received: their mean transit
beyond the step in progress and the share that missed a launch, and the median host gap between steps (runs made
since the loop measures them), beside the stack costs the simulator added (runs made with the stack probe).
Reads a committed ``crossval.json``; writes ``gap.json`` beside it (or ``--out``).

A closed loop of N clients gives throughput = N x tokens per request / time per request, so a request that takes
x% longer in the real stack costs about x% of throughput. Splitting that time shows whether it is spent in the
engine steps (a step longer than its latency), before the first token (HTTP, admission, dispatch) or between
tokens (hand-offs between processes, a model idle while requests travel).

Run: ``python benchmarks/crossval_gap.py calibration/crossval/emulated-r2r-a100/crossval.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def mean_batch(histogram: dict[str, int]) -> float:
    steps = sum(histogram.values())
    return sum(int(size) * count for size, count in histogram.items()) / steps if steps else 0.0


def cell_gap(cell: dict[str, Any]) -> dict[str, Any]:
    """One cell's decomposition (times in ms, ratios real/sim)."""
    real, sim = cell["fidelity"]["real"], cell["fidelity"]["sim"]
    models = []
    for m, steps in enumerate(cell["steps"]):
        profile_s = cell["profile_step_s_at_mean_batch"][m]
        models.append({
            "step_over_profile": steps["mean_step_s"] / profile_s - 1.0 if profile_s else None,
            "busy_fraction_real": steps["busy_fraction"],
            "mean_batch_real": steps["mean_batch"],
            "mean_batch_sim": mean_batch(sim["batch_histograms"][m]),
            "handoff_transit_ms": steps.get("handoff_transit_ms"),
            "handoffs_late_share": steps.get("handoffs_late_share"),
            "host_gap_median_ms": steps.get("host_gap_median_ms"),
        })  # fmt: skip
    return {
        "concurrency": cell["concurrency"],
        "rate_rps": cell.get("rate_rps"),
        "thresholds": cell.get("thresholds"),
        "measured_over_sim": cell["measured_tok_s"] / cell["sim_tok_s"],
        "e2e_p50_real_over_sim": real["e2e_p50"] / sim["e2e_p50"],
        "ttft_p50_ms": [1e3 * real["ttft_p50"], 1e3 * sim["ttft_p50"]],
        "tpot_p50_real_over_sim": real["tpot_p50"] / sim["tpot_p50"],
        "handoffs_per_token": [real["handoffs_per_token"], sim["handoffs_per_token"]],
        "models": models,
    }


def summarize(gaps: list[dict[str, Any]], stack: dict[str, Any] | None = None) -> dict[str, Any]:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    def per_model(key: str) -> list[float | None]:
        values = [[g["models"][m][key] for g in gaps if g["models"][m].get(key) is not None] for m in range(models)]
        return [med(v) if v else None for v in values]

    models = len(gaps[0]["models"])
    return {
        "median_handoff_transit_ms": per_model("handoff_transit_ms"),
        "median_handoffs_late_share": per_model("handoffs_late_share"),
        "median_host_gap_ms": per_model("host_gap_median_ms"),
        "sim_stack": stack,
        "median_measured_over_sim": med([g["measured_over_sim"] for g in gaps]),
        "median_e2e_p50_real_over_sim": med([g["e2e_p50_real_over_sim"] for g in gaps]),
        "median_tpot_p50_real_over_sim": med([g["tpot_p50_real_over_sim"] for g in gaps]),
        "median_ttft_extra_ms": med([g["ttft_p50_ms"][0] - g["ttft_p50_ms"][1] for g in gaps]),
        "median_step_over_profile": [
            med([g["models"][m]["step_over_profile"] for g in gaps]) for m in range(len(gaps[0]["models"]))
        ],
        "median_mean_batch_real_over_sim": [
            med([g["models"][m]["mean_batch_real"] / g["models"][m]["mean_batch_sim"] for g in gaps])
            for m in range(len(gaps[0]["models"]))
        ],
    }


def sim_stack(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The stack costs the run's simulator added (ms; None for runs made before the stack probe)."""
    stack = doc.get("stack")
    if not stack or "host_gap_s" not in stack:
        return None
    keys = ("host_gap_s", "step_overrun_s", "handoff_transit_s")
    out: dict[str, Any] = {k.replace("_s", "_ms"): [1e3 * v for v in stack.get(k) or []] for k in keys}
    return out | {"client_turnaround_ms": 1e3 * stack.get("client_turnaround_s", 0.0), "source": stack["source"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crossval_json", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc = json.loads(args.crossval_json.read_text())
    cells = [c for c in doc["cells"] if c.get("fidelity") and c.get("steps")]
    gaps = [cell_gap(c) for c in cells]
    out = args.out or args.crossval_json.with_name("gap.json")
    result = {"command": f"python benchmarks/crossval_gap.py {args.crossval_json}", "source": str(args.crossval_json),
              "source_created": doc.get("created"), "summary": summarize(gaps, sim_stack(doc)),
              "cells": gaps}  # fmt: skip
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
