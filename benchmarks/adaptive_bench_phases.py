"""The phase bookkeeping of ``benchmarks/adaptive_bench.py``: phases cut into bins and summed back, how the
adaptive run settled in a phase and what it served after, and the vector in force over time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any


def split_phases(phases: Sequence[Any], bin_s: float) -> tuple[list[Any], list[int]]:
    """Each phase cut into bins of at most ``bin_s`` (the overrides and thresholds on its first bin only);
    returns the bins and, per bin, the phase it belongs to."""
    bins: list[Any] = []
    owner: list[int] = []
    for k, phase in enumerate(phases):
        left = phase.duration_s
        first = True
        while left > 1e-9:
            span = min(bin_s, left)
            if first:
                bins.append(replace(phase, duration_s=span))
            else:
                bins.append(type(phase)(duration_s=span))
            owner.append(k)
            left -= span
            first = False
    return bins, owner


def phase_figures(records: Sequence[dict[str, Any]], owner: Sequence[int]) -> list[dict[str, Any]]:
    """Per phase, from the binned records: start, end, committed tokens, tok/s and the thresholds at its end."""
    out: list[dict[str, Any]] = []
    for rec, k in zip(records, owner, strict=True):
        if not out or out[-1]["index"] != k:
            out.append({"index": k, "start_s": rec["start_s"], "committed_tokens": 0})
        row = out[-1]
        row["end_s"] = rec["end_s"]
        row["committed_tokens"] += rec["committed_tokens"]
        row["thresholds"] = rec["thresholds"]
    for row in out:
        span = row["end_s"] - row["start_s"]
        row["throughput_tok_s"] = row["committed_tokens"] / span if span > 0 else 0.0
    return out


def settling(
    switches: Sequence[dict[str, Any]], start_s: float, end_s: float, before: Sequence[int], bstar: Sequence[int]
) -> dict[str, Any]:
    """How the adaptive run settled in one phase ``[start_s, end_s)``, ``before`` being the vector in force at its
    start: settled at the first moment the phase's final vector is in force (``settle_s`` from the phase start,
    0 when it already was); ``switches_after`` counts the switches in the phase after that moment (flapping);
    ``reached_bstar``: whether the final vector is the phase's B*."""
    inside = [s for s in switches if start_s <= s["time_s"] < end_s]
    timeline = [(start_s, list(before))] + [(s["time_s"], list(s["new"])) for s in inside]
    final = timeline[-1][1]
    settled_at = next(t for t, v in timeline if v == final)
    return {
        "final": final,
        "reached_bstar": final == list(bstar),
        "settle_s": settled_at - start_s,
        "switches": len(inside),
        "switches_after": sum(1 for s in inside if s["time_s"] > settled_at),
    }


def after_settling(
    bins: Sequence[dict[str, Any]], oracle: Sequence[dict[str, Any]], since: float, end: float
) -> float | None:
    """Tokens of the bins that start at or after ``since`` and end by ``end``, over the oracle's in the same bins."""
    pairs = [
        (b, o) for b, o in zip(bins, oracle, strict=True) if b["start_s"] >= since - 1e-9 and b["end_s"] <= end + 1e-9
    ]
    num = sum(b["throughput_tok_s"] * (b["end_s"] - b["start_s"]) for b, _ in pairs)
    den = sum(o["throughput_tok_s"] * (o["end_s"] - o["start_s"]) for _, o in pairs)
    return num / den if den > 0 else None


def phase_starts(records: Sequence[dict[str, Any]], owner: Sequence[int]) -> list[dict[str, Any]]:
    """The first record of every phase after the first."""
    return [r for k, (r, o) in enumerate(zip(records, owner, strict=True)) if k and o != owner[k - 1]]


def thresholds_timeline(
    initial: Sequence[int], switches: Sequence[dict[str, Any]], end_s: float
) -> list[tuple[float, list[int]]]:
    """The vector in force over time as steps ``(from_s, vector)``, ending with ``(end_s, last)``."""
    out = [(0.0, list(initial))] + [(s["time_s"], list(s["new"])) for s in switches]
    return [*out, (end_s, out[-1][1])]
