"""Chrome-trace output: every simulated step as a complete ("X") event, one row per model, viewable in
chrome://tracing or https://ui.perfetto.dev."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from trsim.clock import TICKS_PER_S


class StepRecord(NamedTuple):
    """One simulated step: model, launch tick, duration in ticks, batch size, tokens fed, tokens committed."""

    model: int
    launch_tick: int
    duration_ticks: int
    batch_size: int
    num_new_tokens: int
    num_committed: int


def chrome_trace(steps: Sequence[StepRecord], model_names: Sequence[str]) -> dict[str, Any]:
    """The trace-event JSON object for ``steps`` (timestamps in microseconds)."""
    per_us = TICKS_PER_S / 1e6
    events: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": m, "args": {"name": name}}
        for m, name in enumerate(model_names)
    ]
    events.extend(
        {
            "name": f"step b={s.batch_size}",
            "ph": "X",
            "pid": 0,
            "tid": s.model,
            "ts": s.launch_tick / per_us,
            "dur": s.duration_ticks / per_us,
            "args": {"batch_size": s.batch_size, "new_tokens": s.num_new_tokens, "committed": s.num_committed},
        }
        for s in steps
    )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str | Path, steps: Sequence[StepRecord], model_names: Sequence[str]) -> None:
    Path(path).write_text(json.dumps(chrome_trace(steps, model_names)))
