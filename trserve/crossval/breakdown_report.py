"""The per-request latency breakdown of every cell, the real stack beside the simulator, as a markdown table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Table columns: (breakdown part, header); ``{m}`` becomes each model's index.
_FIXED_HEAD = (("to_first_launch", "to 1st launch"),)
_PER_MODEL = (("queue[{m}]", "queue m{m}"), ("handoff[{m}]", "hand-off→m{m}"), ("step[{m}]", "steps m{m}"))
_FIXED_TAIL = (("delivery", "delivery"), ("e2e", "e2e"), ("first_token_steps", "1st token steps"),
               ("ttft", "TTFT"))  # fmt: skip


def columns(num_models: int) -> list[tuple[str, str]]:
    """(part, header) of the table's numeric columns."""
    per_model = [(k.format(m=m), h.format(m=m)) for m in range(num_models) for k, h in _PER_MODEL]
    return [*_FIXED_HEAD, *per_model, *_FIXED_TAIL]


def breakdown_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Mean milliseconds per request in each part, real and simulated rows per cell (nothing when no cell has a
    breakdown)."""
    rows = [c for c in cells if c.get("fidelity", {}).get("real", {}).get("breakdown", {}).get("num_requests")]
    if not rows:
        return []
    num_models = len(rows[0]["thresholds"])
    cols = columns(num_models)
    lines = [
        "",
        "Where a request's latency goes (mean ms per finished request; the parts before `e2e` add up to it; "
        "`trsim.breakdown`):",
        "",
        "| router | N or rate | thresholds | side | requests | " + " | ".join(h for _, h in cols) + " |",
        "|---|---:|---|---|---:|" + "---:|" * len(cols),
    ]
    for cell in rows:
        for side in ("real", "sim"):
            parts = cell["fidelity"][side].get("breakdown", {})
            if not parts.get("num_requests"):
                continue
            values = " | ".join(f"{parts['mean_ms'][k]:.1f}" for k, _ in cols)
            load = cell["concurrency"] if cell.get("rate_rps") is None else f"{cell['rate_rps']:g} req/s"
            lines.append(f"| {cell['router']} | {load} | {tuple(cell['thresholds'])} | {side} | "
                         f"{parts['num_requests']} | {values} |")  # fmt: skip
    return lines
