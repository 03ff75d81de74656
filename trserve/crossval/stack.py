"""The serving stack's own costs, for the simulator, measured on the real stack by a probe run of its own.

With the engines' latency known exactly (``backend: emulated``) what still separates the simulator from the real
server is the stack itself: the subserver loop's work between two steps, and hand-offs travelling between
processes. Before the grid, crossval runs short closed-loop runs of its own (:data:`PROBE_CONCURRENCY`
sessions, and the plan's largest concurrency when larger; every threshold 1, the plan's first router; none of the
scored cells' windows) and takes from their step reports, per model:

* **host gap**: the time the loop spent between the end of a step and the start of the next when it went
  straight on with ready requests (``StepReport.host_gap_s``): the median, or with more than one batch size a
  line through each size's median (``host_gap_s`` at no request plus ``per_request_s`` per request), which
  becomes the simulator's ``host_overhead_s`` and ``host_overhead_per_request_s`` (the model is busy for its
  latency plus this after every step);
* **hand-off transit**: the median transit of a hand-off message this model received, beyond the step it was
  in (``handoff_transit_s / handoffs_received``, each message at its report's mean), which becomes the
  simulator's ``transfer_delay_s`` for hand-offs to this model;
* **step overrun** (``backend: emulated`` only): the median time a step took beyond the latency it was given
  (the loop's calls around the engine, the wait's wake-up), which the simulator adds to the host gap (not when
  a drift probe's factors already scale the steps);

and for the whole stack the **client turnaround**: the median time from the end of the step that finished a
request to the submission of its session's next request (the report's way to the front end and the client's
reaction; not the new request's way to its model), which becomes the simulator's closed-loop
``think_time_s``. And the **delivery**: the median time from the end of a finished request's last step
to the client's receipt of it (``trsim.breakdown``), which becomes the simulator's ``delivery_delay_s``.

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

import numpy as np

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
    #: Per model: host time per request of a step beyond ``host_gap_s`` (empty: none; else that is the fit at 0).
    per_request_s: tuple[float, ...] = ()
    #: From the end of a request's last step to the client's receipt of it (median over the probe's requests).
    delivery_s: float = 0.0

    def __post_init__(self) -> None:
        for name in COST_FIELDS:
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
                raise ConfigError(f"stack.{name}", f"must be finite seconds >= 0, got {list(values)}")
        n = len(self.host_gap_s)
        optional = (len(self.step_overrun_s), len(self.per_request_s))
        if len(self.handoff_transit_s) != n or any(k not in (0, n) for k in optional):
            raise ConfigError(
                "stack", "needs host_gap_s, handoff_transit_s (and step_overrun_s, per_request_s) for the same models"
            )

    def sim_fields(self) -> dict[str, Any]:
        """The :class:`trsim.config.SimConfig` fields these costs set (the turnaround is the workload's)."""
        overrun = self.step_overrun_s or (0.0,) * len(self.host_gap_s)
        overhead = tuple(g + o for g, o in zip(self.host_gap_s, overrun, strict=True))
        return {"host_overhead_s": overhead, "transfer_delay_s": self.handoff_transit_s,
                "host_overhead_per_request_s": self.per_request_s, "delivery_delay_s": self.delivery_s}  # fmt: skip

    def without_overrun(self, why: str) -> StackCosts:
        """These costs with no step overrun added (``why`` is recorded)."""
        return replace(self, step_overrun_s=(), source=self.source | {"step_overrun_not_added": why})

    def to_dict(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in COST_FIELDS}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()} | self.source


#: The costs' fields, as ``stack.json`` names them.
COST_FIELDS = (
    "host_gap_s", "handoff_transit_s", "step_overrun_s", "client_turnaround_s", "per_request_s", "delivery_s"
)  # fmt: skip


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
            "host_gap_counts_by_batch": {str(b): len(v) for b, v in sorted(by_batch.items())},
            "num_handoffs_received": len(transits),
            "handoff_transit_median_s": statistics.median(transits) if transits else None,
            "handoff_transit_mean_s": statistics.fmean(transits) if transits else None,
        })  # fmt: skip
    return out


def costs_from_steps(
    steps: Sequence[StepRecord],
    names: Sequence[str],
    turnarounds: Sequence[float],
    source: dict[str, Any],
    deliveries: Sequence[float] = (),
) -> StackCosts:
    """The medians of :func:`summarize_steps` and of the client ``turnarounds`` and ``deliveries`` as stack costs
    (0 without samples). Where the steps hold more than one batch size, the host gap is a line in the batch size
    (:func:`host_gap_line`)."""
    models = summarize_steps(steps, names)
    lines = [host_gap_line(m["host_gap_median_s_by_batch"], m["host_gap_counts_by_batch"]) for m in models]
    gaps = tuple(line[0] if line else m["host_gap_median_s"] or 0.0 for m, line in zip(models, lines, strict=True))
    per_request = tuple(line[1] if line else 0.0 for line in lines)
    transits = tuple(m["handoff_transit_median_s"] or 0.0 for m in models)
    overruns = tuple(max(0.0, m["step_overrun_median_s"] or 0.0) for m in models)
    turnaround = statistics.median(turnarounds) if turnarounds else 0.0
    delivery = max(0.0, statistics.median(deliveries)) if deliveries else 0.0
    client = {"num_turnarounds": len(turnarounds), "client_turnaround_mean_s": _mean(turnarounds),
              "num_deliveries": len(deliveries), "delivery_mean_s": _mean(deliveries)}  # fmt: skip
    source = {**source, "models": models, "client": client}
    return StackCosts(gaps, transits, turnaround, source, overruns, per_request if any(lines) else (), delivery)


def host_gap_line(medians: dict[str, float], counts: dict[str, int]) -> tuple[float, float] | None:
    """(gap at no request, gap per request): the count-weighted least-squares line through the median host gap of
    each batch size, its slope at least 0 (None with fewer than two batch sizes)."""
    if len(medians) < 2:
        return None
    sizes = [int(b) for b in medians]
    weights = np.sqrt([counts[str(b)] for b in sizes])
    slope, intercept = np.polyfit(sizes, [medians[str(b)] for b in sizes], 1, w=weights)
    if slope <= 0:
        return statistics.median(medians.values()), 0.0
    if intercept < 0:  # the line through the origin instead
        w2 = weights**2
        return 0.0, float(np.dot(w2 * sizes, [medians[str(b)] for b in sizes]) / np.dot(w2, np.square(sizes)))
    return float(intercept), float(slope)


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
    concurrencies: Sequence[int] = (PROBE_CONCURRENCY,),
) -> StackCosts:
    """Run the probe with ``programs`` (``router`` describes them) once per concurrency (so the host gap is seen
    at more than one batch size) on a server that holds no request (leaves it holding none) and measure the
    stack's costs from all of them together."""
    short = replace(
        workload, warmup_s=min(PROBE_WARMUP_S, workload.warmup_s), measure_s=min(PROBE_MEASURE_S, workload.measure_s)
    )
    policies = [BatchingPolicy(threshold=1, max_wait_s=None, max_batch=max_batch)] * len(names)
    runs = [await run_cell(frontend, programs, policies, n, short, f"stack-probe-n{n}") for n in concurrencies]
    settings = {
        "concurrency": concurrencies[0],
        "concurrencies": list(concurrencies),
        "thresholds": [1] * len(names),
        "router": router,
        "workload": workload.name,
        "warmup_s": short.warmup_s,
        "measure_s": short.measure_s,
        "throughput_tok_s": runs[0].throughput_tok_s,
        "throughputs_tok_s": [run.throughput_tok_s for run in runs],
    }
    source = {"source": "probe", "out_of_sample": OUT_OF_SAMPLE_NOTE, "probe": settings, "command": command}
    source |= {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    steps = [s for run in runs for s in run.steps]
    turnarounds = [t for run in runs for t in run.turnarounds]
    deliveries = [b.delivery for run in runs for b in run.breakdowns]
    return costs_from_steps(steps, names, turnarounds, source, deliveries)


def probe_concurrencies(plan_concurrencies: Sequence[int]) -> tuple[int, ...]:
    """The probe's concurrencies: :data:`PROBE_CONCURRENCY`, and the plan's largest when it is larger."""
    top = max(plan_concurrencies, default=PROBE_CONCURRENCY)
    return (PROBE_CONCURRENCY, top) if top > PROBE_CONCURRENCY else (PROBE_CONCURRENCY,)


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
    return StackCosts(
        tuple(entry["host_gap_s"]), tuple(entry["handoff_transit_s"]), entry.get("client_turnaround_s", 0.0),
        source, tuple(entry.get("step_overrun_s", ())), tuple(entry.get("per_request_s", ())),
        entry.get("delivery_s", 0.0),
    )  # fmt: skip


def stack_line(stack: dict[str, Any]) -> str:
    """One line on the stack costs of a result document's ``stack`` entry (:meth:`StackCosts.to_dict`)."""
    if "host_gap_s" not in stack:
        return stack.get("source", "none")
    overrun = stack.get("step_overrun_s") or [0.0] * len(stack["host_gap_s"])
    return (
        f"host gap {_ms(stack['host_gap_s'])} ms and step overrun {_ms(overrun)} ms per step, hand-off transit "
        f"{_ms(stack['handoff_transit_s'])} ms per message (per model), per request in a step "
        f"{_ms(stack.get('per_request_s') or [0.0] * len(overrun))} ms, client turnaround "
        f"{_ms([stack.get('client_turnaround_s', 0.0)])} ms, delivery {_ms([stack.get('delivery_s', 0.0)])} ms "
        f"({stack['source']})"
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
        per_request, delivery = data.get("per_request_s", []), data.get("delivery_s", 0.0)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError("--stack", f"{path}: needs JSON with host_gap_s and handoff_transit_s ({exc})") from None
    lists = [("host_gap_s", gaps), ("handoff_transit_s", transits)]
    lists += [(name, v) for name, v in (("step_overrun_s", overrun), ("per_request_s", per_request)) if v]
    for name, values in lists:
        if not isinstance(values, list) or len(values) != num_models:
            raise ConfigError("--stack", f"{path}: {name} needs one value per model ({num_models}), got {values}")
    try:
        source = {"source": f"file {path}", "read_from": data}
        extra = (tuple(overrun), tuple(per_request), delivery)
        return StackCosts(tuple(gaps), tuple(transits), turnaround, source, *extra)
    except ConfigError as exc:
        raise ConfigError("--stack", f"{path}: {exc}") from None
