"""Where a request's latency goes, the same way for the simulator and the real stack.

A request's **timeline** is its submission, the launch and end of every step it was in (``trcore.RouteEvent``:
both drivers record them from the same core) and when the client got its first and last token. It splits into
parts that add up to the end-to-end latency exactly:

* ``to_first_launch``: submission to the launch of its first step (the front end, the dispatch to the entry model,
  the entry model's queue and delayed batching);
* ``queue[m]``: on model ``m``, from the end of one of its steps to the launch of the next when both ran on ``m``
  (the running step of others, delayed batching, the loop's own time between steps);
* ``handoff[m]``: from the end of a step on another model to the launch of the next step on ``m`` (the hand-off's
  transit and ``m``'s queue);
* ``step[m]``: time inside ``m``'s steps;
* ``delivery``: the last step's end to the client's last token.

TTFT splits the same way up to the step that committed the first token (``first_token_steps``: its waits and
steps after ``to_first_launch``; ``first_token_delivery``: that step's end to the client's first token).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trcore import RouteEvent
from trcore.errors import ConfigError

#: Per request: (submitted, first token at the client, last token at the client), on the events' clock.
RequestTimes = tuple[float, float, float]


@dataclass(frozen=True)
class Timeline:
    """One finished request: when it was submitted, its steps in order, when the client got its first and last
    token."""

    request_id: str
    submitted: float
    first_token: float
    done: float
    steps: tuple[RouteEvent, ...]


@dataclass
class Breakdown:
    """One request's latency in parts (seconds; the per-model lists are indexed by model)."""

    to_first_launch: float
    queue: list[float]
    handoff: list[float]
    step: list[float]
    num_steps: list[int]
    num_visits: list[int]
    delivery: float
    first_token_steps: float
    first_token_delivery: float
    e2e: float
    ttft: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def parts_sum(self) -> float:
        """The parts that make up ``e2e`` (equal to it up to rounding)."""
        return self.to_first_launch + sum(self.queue) + sum(self.handoff) + sum(self.step) + self.delivery


def timelines_from(events: Iterable[RouteEvent], times: Mapping[str, RequestTimes]) -> list[Timeline]:
    """The timeline of every request in ``times`` that has steps in ``events`` (any number of models, any order)."""
    grouped: dict[str, list[RouteEvent]] = {}
    for event in events:
        if event.request_id in times:
            grouped.setdefault(event.request_id, []).append(event)
    out = []
    for rid, steps in grouped.items():
        submitted, first, done = times[rid]
        out.append(Timeline(rid, submitted, first, done, tuple(sorted(steps, key=lambda e: e.time))))
    return out


def breakdown(timeline: Timeline, num_models: int) -> Breakdown:
    """Split one timeline (see the module docstring); a step without its launch time is refused."""
    if not timeline.steps:
        raise ConfigError("timeline", f"request {timeline.request_id} has no steps")
    zeros = [0.0] * num_models
    parts = Breakdown(0.0, list(zeros), list(zeros), list(zeros), [0] * num_models, [0] * num_models, 0.0, 0.0, 0.0,
                      timeline.done - timeline.submitted, timeline.first_token - timeline.submitted)  # fmt: skip
    previous: RouteEvent | None = None
    first_kept_end: float | None = None
    for event in timeline.steps:
        if event.launched is None:
            raise ConfigError("timeline", f"request {timeline.request_id}: a step without its launch time")
        m = event.model
        if previous is None:
            parts.to_first_launch = event.launched - timeline.submitted
        elif previous.model == m:
            parts.queue[m] += event.launched - previous.time
        else:
            parts.handoff[m] += event.launched - previous.time
        parts.num_visits[m] += previous is None or previous.model != m
        parts.step[m] += event.time - event.launched
        parts.num_steps[m] += 1
        if event.kept and first_kept_end is None:
            first_kept_end = event.time
        previous = event
    assert previous is not None
    parts.delivery = timeline.done - previous.time
    first_end = first_kept_end if first_kept_end is not None else previous.time
    parts.first_token_steps = first_end - timeline.steps[0].launched  # type: ignore[operator]
    parts.first_token_delivery = timeline.first_token - first_end
    return parts


def part_names(num_models: int) -> list[str]:
    """The names :func:`summarize` reports, in table order."""
    per_model = [f"{kind}[{m}]" for m in range(num_models) for kind in ("queue", "handoff", "step")]
    return ["to_first_launch", *per_model, "delivery", "e2e", "first_token_steps", "first_token_delivery", "ttft"]


def _flat(parts: Breakdown) -> dict[str, float]:
    out = {"to_first_launch": parts.to_first_launch, "delivery": parts.delivery, "e2e": parts.e2e,
           "first_token_steps": parts.first_token_steps, "first_token_delivery": parts.first_token_delivery,
           "ttft": parts.ttft}  # fmt: skip
    for m in range(len(parts.step)):
        out |= {f"queue[{m}]": parts.queue[m], f"handoff[{m}]": parts.handoff[m], f"step[{m}]": parts.step[m]}
    return out


def summarize(breakdowns: Sequence[Breakdown], num_models: int) -> dict[str, Any]:
    """Per part, the mean and p99 over requests (milliseconds), and the mean steps and visits per model."""
    if not breakdowns:
        return {"num_requests": 0}
    flats = [_flat(b) for b in breakdowns]
    names = part_names(num_models)
    return {
        "num_requests": len(breakdowns),
        "mean_ms": {k: 1e3 * statistics.fmean(f[k] for f in flats) for k in names},
        "p99_ms": {k: 1e3 * float(np.percentile([f[k] for f in flats], 99)) for k in names},
        "mean_steps": [statistics.fmean(b.num_steps[m] for b in breakdowns) for m in range(num_models)],
        "mean_visits": [statistics.fmean(b.num_visits[m] for b in breakdowns) for m in range(num_models)],
    }


def breakdowns(events: Iterable[RouteEvent], times: Mapping[str, RequestTimes], num_models: int) -> list[Breakdown]:
    """:func:`breakdown` of every request in ``times`` with steps in ``events``."""
    return [breakdown(t, num_models) for t in timelines_from(events, times)]


def of_requests(events: Iterable[RouteEvent], times: Mapping[str, RequestTimes], num_models: int) -> dict[str, Any]:
    """:func:`summarize` of every request in ``times`` with steps in ``events``."""
    return summarize(breakdowns(events, times, num_models), num_models)


def compare(real: Mapping[str, Any], sim: Mapping[str, Any]) -> dict[str, float]:
    """Per part, the simulator's mean minus the real mean (ms), from two :func:`summarize` results."""
    if not real.get("num_requests") or not sim.get("num_requests"):
        return {}
    return {k: sim["mean_ms"][k] - real["mean_ms"][k] for k in real["mean_ms"]}
