"""Throughput at matched quality: each bench row next to the answer quality of what it ran.

A routed row is at a committed operating point (``models/local-smollm2/operating_points.json``, made by ``tokenrouter
quality``: the cheapest swept parameters reaching a share of large-only's accuracy on the held-out questions)
when its router ran exactly that point's parameters on the pair the points were measured on (the default
config's checkpoints); it then carries the point's measured large-model share and
accuracy. Other parameters carry no quality (none was measured for them). ``llm-only`` and ``vllm-server`` run
the large model alone, greedy, float32: the quality run's large-only end point, whose accuracy is each point's
accuracy over its relative accuracy (``vllm-server`` was not itself run on the questions: same checkpoint and
decoding, another engine configuration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trserve.bench.systems import SINGLE_MODEL
from trserve.pairs.fill import own_params
from trserve.server.defaults import DEFAULT_CONFIG, OPERATING_POINTS, load_operating_points
from trsim.pairs import LOCAL_PAIR

#: Routed systems whose rows enter the matched-quality table.
ROUTED = ("tokenrouter", "tokenrouter-b1", "tokenrouter-bstar")
SOURCE = "models/local-smollm2/operating_points.json"


def large_only_accuracy(points: Mapping[str, Any]) -> float | None:
    """Large-only's accuracy on the quality set: a point's accuracy over its relative accuracy."""
    for point in points.values():
        if point.get("relative_accuracy"):
            return float(point["accuracy"]) / float(point["relative_accuracy"])
    return None


def quality_of(
    system: str, router: str, params: Mapping[str, Any] | None, points: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The measured quality behind a bench row, or None when the row ran unmeasured parameters."""
    points = load_operating_points(OPERATING_POINTS) if points is None else points
    if system in SINGLE_MODEL:
        accuracy = large_only_accuracy(points)
        if accuracy is None:
            return None
        measured = system == "llm-only"
        return {"point": "large-only", "large_share": 1.0, "accuracy": accuracy, "relative_accuracy": 1.0,
                "source": f"{SOURCE} (large-only: accuracy / relative_accuracy)",
                "note": "the large model alone" if measured else
                "the large model alone on vLLM's own server; not run on the question set itself"}  # fmt: skip
    point = points.get(router)
    if point is None or params is None or own_params(params, LOCAL_PAIR) != dict(point["params"]):
        return None
    return {"point": f"{router} {_params(point['params'])}", "large_share": point["large_share"],
            "accuracy": point["accuracy"], "relative_accuracy": point["relative_accuracy"],
            "target_relative_accuracy": point.get("target_relative_accuracy"), "source": SOURCE}  # fmt: skip


def on_measured_pair(base: Mapping[str, Any]) -> bool:
    """Whether ``base`` serves the pair the operating points were measured on: the default config's checkpoints
    and dtypes on real engines (``tokenrouter quality`` runs the default config)."""
    want = [(m["path"], m["dtype"]) for m in DEFAULT_CONFIG["models"]]
    have = [(m.get("path"), m.get("dtype")) for m in base["models"]]
    return base.get("backend", "vllm") == "vllm" and have == want


def quality_for(
    base: Mapping[str, Any], system: str, router: str, params: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """:func:`quality_of` for a bench of ``base``; None for any other pair (its quality was not measured)."""
    return quality_of(system, router, params) if on_measured_pair(base) else None


def _params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in params.items())


def matched_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency: every routed row at an operating point and the single-model rows, with their quality and
    each one's throughput over ``llm-only``'s and ``vllm-server``'s at the same N."""
    out = []
    for n in sorted({r["concurrency"] for r in runs}):
        at_n = [r for r in runs if r["concurrency"] == n and r.get("quality")]
        refs = {s: next((r for r in at_n if r["system"] == s), None) for s in SINGLE_MODEL}
        for r in at_n:
            if r["system"] not in (*ROUTED, *SINGLE_MODEL):
                continue
            row = {"system": r["system"], "router": r["router"], "concurrency": n,
                   "throughput_tok_s": r["throughput_tok_s"], "bench_large_share": r["llm_token_fraction"],
                   "ttft_p50_s": r["ttft_p50_s"], "tpot_p50_s": r["tpot_p50_s"], **r["quality"]}  # fmt: skip
            for name, ref in refs.items():
                ok = ref is not None and ref["throughput_tok_s"]
                row[f"over_{name.replace('-', '_')}"] = r["throughput_tok_s"] / ref["throughput_tok_s"] if ok else None
            out.append(row)
    return out


def matched_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: throughput beside the quality it was measured at."""
    lines = [
        "| N | system | router: operating point | quality-set large share | accuracy (rel. to large-only) | "
        "bench large share | tok/s | / llm-only | / vllm-server | TTFT p50 ms |",
        "|" + "---|" * 10,
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} | {r['system']} | {r['point']} | {100 * r['large_share']:.1f}% | "
            f"{100 * r['accuracy']:.1f}% ({100 * r['relative_accuracy']:.0f}%) | "
            f"{100 * r['bench_large_share']:.1f}% | {r['throughput_tok_s']:.1f} | {_x(r['over_llm_only'])} | "
            f"{_x(r['over_vllm_server'])} | {_ms(r['ttft_p50_s'])} |"
        )
    return "\n".join(lines) + "\n"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.0f}"
