"""The KV memory counters of a bench cell, read from the ``/metrics`` texts the load generator took at both ends of
each window (the server sets them from every step's report; ``trserve.frontend.metrics.observe_memory``).

Per model: the blocks (``blocks_total``, ``blocks_used``, ``blocks_parked``) at the end of a window, and the events
(``spilled``, ``preempted``, ``recomputed_tokens``, ``admission_waits``) during it, as differences of the counters,
which count since the subserver started. A model without KV accounting has no such series and is left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from trserve.runtime.reports import MEMORY_EVENTS

#: ``tokenrouter_kv_blocks`` kinds, as the cell reports them.
BLOCK_KINDS = {"total": "blocks_total", "used": "blocks_used", "parked": "blocks_parked"}
EVENTS = MEMORY_EVENTS


def _series(text: str, name: str, label: str) -> dict[str, dict[str, float]]:
    """``{model: {label value: value}}`` of a series labelled ``model`` and ``label``."""
    out: dict[str, dict[str, float]] = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} ([0-9.e+-]+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if "model" in found and label in found:
            out.setdefault(found["model"], {})[found[label]] = float(value)
    return out


def window_memory(after: str, before: str) -> dict[str, dict[str, int]]:
    """Per model: blocks at the window's end (``after``) and the events between ``before`` and ``after``."""
    blocks = _series(after, "tokenrouter_kv_blocks", "kind")
    ends = _series(after, "tokenrouter_kv_events_total", "event")
    starts = _series(before, "tokenrouter_kv_events_total", "event")
    out: dict[str, dict[str, int]] = {}
    for model in sorted(set(blocks) | set(ends)):
        row = {field: int(blocks.get(model, {}).get(kind, 0)) for kind, field in BLOCK_KINDS.items()}
        for event in EVENTS:
            row[event] = int(ends.get(model, {}).get(event, 0) - starts.get(model, {}).get(event, 0))
        out[model] = row
    return out


def cell_memory(windows: Sequence[dict[str, dict[str, int]]]) -> dict[str, dict[str, Any]] | None:
    """A cell's memory over its windows: events summed, blocks at the last window's end, the most blocks used at
    any window's end (``blocks_used_max``); None when no window saw KV accounting."""
    models = sorted({m for w in windows for m in w})
    if not models:
        return None
    out: dict[str, dict[str, Any]] = {}
    for model in models:
        rows = [w[model] for w in windows if model in w]
        last = rows[-1]
        out[model] = {
            **{field: last[field] for field in BLOCK_KINDS.values()},
            "blocks_used_max": max(r["blocks_used"] for r in rows),
            **{event: sum(r[event] for r in rows) for event in EVENTS},
        }
    return out
