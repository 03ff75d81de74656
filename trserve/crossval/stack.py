"""The serving stack's own costs, for the simulator, measured on the real stack by a probe run of its own.

With the engines' latency known exactly (``backend: emulated``) what still separates the simulator from the real
server is the stack itself: the subserver loop's work between two steps, and hand-offs travelling between
processes. Before the grid, crossval runs one short closed-loop run of its own (:data:`PROBE_CONCURRENCY`
sessions, every threshold 1, the plan's first router; none of the scored cells' windows) and takes from its step
reports, per model:

* **host gap**: the median time the loop spent between the end of a step and the start of the next when it went
  straight on with ready requests (``StepReport.host_gap_s``), which becomes the simulator's
  ``host_overhead_s`` (the model is busy for its latency plus this after every step);
* **hand-off transit**: the median transit of a hand-off message this model received, beyond the step it was
  in (``handoff_transit_s / handoffs_received``, each message at its report's mean), which becomes the
  simulator's ``transfer_delay_s`` for hand-offs to this model;

* **step overrun** (``backend: emulated`` only): the median time a step took beyond the latency it was given
  (the loop's calls around the engine, the wait's wake-up), which the simulator adds to the host gap (not when
  a drift probe's factors already scale the steps);

and for the whole stack the **client turnaround**: the median time from the end of the step that finished a
request to the submission of its session's next request (the report's way to the front end and the client's
reaction; not the new request's way to its model), which becomes the simulator's closed-loop
``think_time_s``.

A model with no such sample (it never went straight on, or received no hand-off) gets 0. The result is written
as ``stack.json`` beside ``crossval.json``; ``tokenrouter crossval --stack FILE`` reads one instead of probing.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trcore import BatchingPolicy
from trcore.errors import ConfigError
from trserve.crossval.harness import ClientWorkload, CrossvalFrontEnd, ProgramFactory, StepRecord, run_cell

STACK_FILE = "stack.json"
#: The probe run: sessions, warm-up and measured window (at most the plan's own).
PROBE_CONCURRENCY = 2
PROBE_WARMUP_S = 1.0
PROBE_MEASURE_S = 5.0
OUT_OF_SAMPLE_NOTE = (
    "a closed-loop run of its own before the grid, not one of the scored cells' windows (where the grid has a "
    "cell with the probe's N and thresholds, the probe is still a separate run)"
)


@dataclass(frozen=True)
class StackCosts:
    """Per model: the host gap per step and the transit of a hand-off it receives (seconds, what the simulator
    adds), and where they came from (``source``: the probe's settings and summary, or the file read)."""

    host_gap_s: tuple[float, ...]
    handoff_transit_s: tuple[float, ...]
    client_turnaround_s: float = 0.0
    source: dict[str, Any] = field(default_factory=dict)
    #: Per model (empty: none).
    step_overrun_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in COST_FIELDS:
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
                raise ConfigError(f"stack.{name}", f"must be finite seconds >= 0, got {list(values)}")
        if len(self.handoff_transit_s) != len(self.host_gap_s) or len(self.step_overrun_s) not in (
            0,
            len(self.host_gap_s),
        ):
            raise ConfigError("stack", "needs host_gap_s, handoff_transit_s (and step_overrun_s) for the same models")

    def sim_fields(self) -> dict[str, tuple[float, ...]]:
        """The :class:`trsim.config.SimConfig` fields these costs set (the turnaround is the workload's)."""
        overrun = self.step_overrun_s or (0.0,) * len(self.host_gap_s)
        overhead = tuple(g + o for g, o in zip(self.host_gap_s, overrun, strict=True))
        return {"host_overhead_s": overhead, "transfer_delay_s": self.handoff_transit_s}

    def without_overrun(self, why: str) -> StackCosts:
        """These costs with no step overrun added (``why`` is recorded)."""
        return replace(self, step_overrun_s=(), source=self.source | {"step_overrun_not_added": why})

    def to_dict(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in COST_FIELDS}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()} | self.source


#: The costs' fields, as ``stack.json`` names them.
COST_FIELDS = ("host_gap_s", "handoff_transit_s", "step_overrun_s", "client_turnaround_s")


@dataclass(frozen=True)
class StackProbe:
    """Asks crossval to probe the stack before the grid; ``command`` (what ran it) is recorded with the result."""

    command: str = ""


def model_samples(steps: Sequence[StepRecord], model: int) -> tuple[list[float], list[float]]:
    """Model ``model``'s host gaps (steps that followed a step at once) and per-message hand-off transits."""
    mine = [s for s in steps if s.model == model]
    gaps = [s.host_gap_s for s in mine if s.host_gap_s is not None]
    transits = [s.handoff_transit_s / s.handoffs_received for s in mine if s.handoffs_received > 0]
    weights = [s.handoffs_received for s in mine if s.handoffs_received > 0]
    return gaps, [t for t, w in zip(transits, weights, strict=True) for _ in range(w)]


def summarize_steps(steps: Sequence[StepRecord], names: Sequence[str]) -> list[dict[str, Any]]:
    """Per model: median and mean host gap and hand-off transit (seconds, None without samples), sample counts,
    the median host gap per batch size, and the median step overrun (emulated engines)."""
    out = []
    for m, name in enumerate(names):
        gaps, transits = model_samples(steps, m)
        by_batch: dict[int, list[float]] = {}
        for s in steps:
            if s.model == m and s.host_gap_s is not None:
                by_batch.setdefault(s.batch_size, []).append(s.host_gap_s)
        overruns = [s.step_s - s.emulated_s for s in steps if s.model == m and s.emulated_s is not None]
        out.append({
            "model": name,
            "num_steps": sum(s.model == m for s in steps),
            "step_overrun_median_s": statistics.median(overruns) if overruns else None,
            "num_host_gaps": len(gaps),
            "host_gap_median_s": statistics.median(gaps) if gaps else None,
            "host_gap_mean_s": statistics.fmean(gaps) if gaps else None,
            "host_gap_median_s_by_batch": {str(b): statistics.median(v) for b, v in sorted(by_batch.items())},
            "num_handoffs_received": len(transits),
            "handoff_transit_median_s": statistics.median(transits) if transits else None,
            "handoff_transit_mean_s": statistics.fmean(transits) if transits else None,
        })  # fmt: skip
    return out


def costs_from_steps(
    steps: Sequence[StepRecord], names: Sequence[str], turnarounds: Sequence[float], source: dict[str, Any]
) -> StackCosts:
    """The medians of :func:`summarize_steps` and of the client ``turnarounds`` as stack costs (0 without
    samples)."""
    models = summarize_steps(steps, names)
    gaps = tuple(m["host_gap_median_s"] or 0.0 for m in models)
    transits = tuple(m["handoff_transit_median_s"] or 0.0 for m in models)
    overruns = tuple(max(0.0, m["step_overrun_median_s"] or 0.0) for m in models)
    turnaround = statistics.median(turnarounds) if turnarounds else 0.0
    client = {"num_turnarounds": len(turnarounds), "client_turnaround_mean_s": _mean(turnarounds)}
    return StackCosts(gaps, transits, turnaround, {**source, "models": models, "client": client}, overruns)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


async def probe_stack(
    frontend: CrossvalFrontEnd,
    programs: ProgramFactory,
    router: dict[str, Any],
    names: Sequence[str],
    workload: ClientWorkload,
    max_batch: int,
    command: str = "",
) -> StackCosts:
    """Run the probe with ``programs`` (``router`` describes them) on a server that holds no request (leaves it
    holding none) and measure the stack's costs."""
    short = replace(
        workload, warmup_s=min(PROBE_WARMUP_S, workload.warmup_s), measure_s=min(PROBE_MEASURE_S, workload.measure_s)
    )
    policies = [BatchingPolicy(threshold=1, max_wait_s=None, max_batch=max_batch)] * len(names)
    run = await run_cell(frontend, programs, policies, PROBE_CONCURRENCY, short, "stack-probe")
    settings = {
        "concurrency": PROBE_CONCURRENCY,
        "thresholds": [1] * len(names),
        "router": router,
        "workload": workload.name,
        "warmup_s": short.warmup_s,
        "measure_s": short.measure_s,
        "throughput_tok_s": run.throughput_tok_s,
    }
    source = {"source": "probe", "out_of_sample": OUT_OF_SAMPLE_NOTE, "probe": settings, "command": command}
    source |= {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return costs_from_steps(run.steps, names, run.turnarounds, source)


def costs_for_sim(stack: StackCosts | StackProbe | None, drift_scaled: bool) -> StackCosts | None:
    """What the simulator adds: measured or read costs (none for a probe that did not run), without the step
    overrun when a drift probe scaled the latencies to the observed steps (they hold it already)."""
    if not isinstance(stack, StackCosts):
        return None
    return stack.without_overrun("the drift probe's factors scale the steps already") if drift_scaled else stack


def stack_from_doc(entry: dict[str, Any] | None) -> StackCosts | None:
    """The stack costs a written run's ``stack`` entry records (None: it had none, or predates them)."""
    if not entry or "host_gap_s" not in entry:
        return None
    source = {k: v for k, v in entry.items() if k not in COST_FIELDS}
    turnaround, overrun = entry.get("client_turnaround_s", 0.0), tuple(entry.get("step_overrun_s", ()))
    return StackCosts(tuple(entry["host_gap_s"]), tuple(entry["handoff_transit_s"]), turnaround, source, overrun)


def stack_line(stack: dict[str, Any]) -> str:
    """One line on the stack costs of a result document's ``stack`` entry (:meth:`StackCosts.to_dict`)."""
    if "host_gap_s" not in stack:
        return stack.get("source", "none")
    overrun = stack.get("step_overrun_s") or [0.0] * len(stack["host_gap_s"])
    return (
        f"host gap {_ms(stack['host_gap_s'])} ms and step overrun {_ms(overrun)} ms per step, hand-off transit "
        f"{_ms(stack['handoff_transit_s'])} ms per message (per model), client turnaround "
        f"{_ms([stack.get('client_turnaround_s', 0.0)])} ms ({stack['source']})"
    )


def _ms(values: Sequence[float]) -> str:
    return " / ".join(f"{1e3 * v:.3f}" for v in values)


def load_stack(path: Path, num_models: int) -> StackCosts:
    """A ``stack.json`` (as a probe writes it) for a config of ``num_models`` models. A file from before step
    overruns or turnarounds were measured has none."""
    if not path.is_file():
        raise ConfigError("--stack", f"{path} is not a file")
    try:
        data = json.loads(path.read_text())
        gaps, transits = data["host_gap_s"], data["handoff_transit_s"]
        overrun, turnaround = data.get("step_overrun_s", []), data.get("client_turnaround_s", 0.0)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError("--stack", f"{path}: needs JSON with host_gap_s and handoff_transit_s ({exc})") from None
    lists = [("host_gap_s", gaps), ("handoff_transit_s", transits)] + ([("step_overrun_s", overrun)] if overrun else [])
    for name, values in lists:
        if not isinstance(values, list) or len(values) != num_models:
            raise ConfigError("--stack", f"{path}: {name} needs one value per model ({num_models}), got {values}")
    try:
        source = {"source": f"file {path}", "read_from": data}
        return StackCosts(tuple(gaps), tuple(transits), turnaround, source, tuple(overrun))
    except ConfigError as exc:
        raise ConfigError("--stack", f"{path}: {exc}") from None
