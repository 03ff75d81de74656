"""The drift probe: before a tool predicts from calibration profiles, time each engine at a few batch sizes and
compare with its profile. Profiles drift between machines of one kind (and with load on a shared machine), so
the ratio is reported, and then either applied to the profile's latencies as a recorded scale factor (``scale``),
or the run stops with a message naming ``tokenrouter calibrate`` when it is beyond the tolerance (``stop``), or
only reported (``report``); ``skip`` runs no probe (the results say so).

The probe runs on the crossval workers (the server's own processes): for each model, every request is routed to
that model (a Markov router whose every row sends all steps there; the entry model still prefills) at a few
concurrencies, for a couple of seconds each, and the pure decode steps (one fed token per request) are compared
with the profile at the same batch size and the workload's typical context.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trcore import PROGRAMS, BatchingPolicy, RoutingProgram
from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trserve.crossval.harness import ClientWorkload, CrossvalFrontEnd, StepRecord, crossval_server, run_cell
from trserve.crossval.predict import Calibration

DRIFT_MODES = ("scale", "stop", "report", "skip")
#: Concurrencies of the probe (batch sizes the decode steps then run at) and its window per concurrency.
PROBE_CONCURRENCIES = (1, 2, 4)
PROBE_WARMUP_S = 0.5
PROBE_MEASURE_S = 2.0
PROBE_MAX_TOKENS = 32
#: Beyond this relative difference from the profile, ``stop`` stops.
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class DriftReport:
    """Per model: median observed / profile step time over the probe's decode steps (``ratios``), the same per
    batch size, the number of steps it rests on; the mode, the tolerance, what was done (``action``) and the
    factors applied to the profiles (1.0 each unless ``action`` is ``scaled``)."""

    ratios: list[float]
    per_batch: list[dict[int, float]]
    num_steps: list[int]
    mode: str
    tolerance: float
    action: str
    factors: list[float] = field(default_factory=list)
    context_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_batch"] = [{str(b): r for b, r in d.items()} for d in self.per_batch]
        return out


def step_ratios(
    steps: Sequence[StepRecord], calibration: Calibration, context: int, num_models: int
) -> tuple[list[float], list[dict[int, float]], list[int]]:
    """Per model: median ratio of observed to profile step time over pure decode steps (every request fed one
    token) at ``context`` tokens per request, the median per batch size, and how many steps it rests on (a model
    with no such step gets ratio 1.0 and 0 steps)."""
    ratios, per_batch, counts = [], [], []
    for m in range(num_models):
        by_batch: dict[int, list[float]] = {}
        for s in steps:
            if s.model == m and s.batch_size > 0 and s.num_new_tokens == s.batch_size:
                predicted = float(calibration.latency[m].predict(s.batch_size, s.batch_size * context, 0))
                by_batch.setdefault(s.batch_size, []).append(s.step_s / predicted)
        every = [r for rs in by_batch.values() for r in rs]
        ratios.append(statistics.median(every) if every else 1.0)
        per_batch.append({b: statistics.median(rs) for b, rs in sorted(by_batch.items())})
        counts.append(len(every))
    return ratios, per_batch, counts


def decide(ratios: Sequence[float], mode: str, tolerance: float, names: Sequence[str]) -> tuple[str, list[float]]:
    """What to do with the probe's ratios: ``(action, factors)``; raises for ``stop`` beyond the tolerance."""
    if mode not in DRIFT_MODES:
        raise ConfigError("drift", f"unknown mode {mode!r}; valid: {', '.join(DRIFT_MODES)}")
    off = [(n, r) for n, r in zip(names, ratios, strict=True) if abs(r - 1.0) > tolerance]
    if mode == "scale":
        return "scaled", list(ratios)
    if mode == "stop" and off:
        drifted = ", ".join(f"{n} steps at {r:.2f}x its profile" for n, r in off)
        raise ConfigError(
            "drift",
            f"{drifted} (drift probe, tolerance {tolerance:.0%}); re-run `tokenrouter calibrate` on this machine "
            "or pass --drift scale",
        )
    return ("within tolerance" if not off else "reported only"), [1.0] * len(ratios)


def probe_program(target: int, num_models: int) -> Callable[[int], RoutingProgram]:
    """Programs that send every step of every request to ``target`` (its tokens kept)."""
    P = [[1.0 if j == target else 0.0 for j in range(num_models)] for _ in range(num_models)]
    C = [[1.0] * num_models for _ in range(num_models)]
    return lambda m: PROGRAMS.create("markov", m, num_models, P=P, C=C, seed=0)


async def probe_steps(
    frontend: CrossvalFrontEnd, workload: ClientWorkload, num_models: int, max_batch: int
) -> list[StepRecord]:
    """Run the probe cells on a server that holds no request; returns their in-window steps."""
    short = replace(
        workload, max_tokens=PROBE_MAX_TOKENS, output_lengths=(), warmup_s=PROBE_WARMUP_S, measure_s=PROBE_MEASURE_S
    )
    policies = [BatchingPolicy(threshold=1, max_wait_s=None, max_batch=max_batch)] * num_models
    steps: list[StepRecord] = []
    for m in range(num_models):
        for n in PROBE_CONCURRENCIES:
            run = await run_cell(frontend, probe_program(m, num_models), policies, n, short, f"probe-m{m}-n{n}")
            steps.extend(run.steps)
    return steps


def probe_context(workload: ClientWorkload) -> int:
    """Mean context of a probe decode step: mean prompt plus half the probe's output."""
    return max(1, round(sum(map(len, workload.prompts)) / len(workload.prompts) + PROBE_MAX_TOKENS / 2))


async def probe_drift(
    frontend: CrossvalFrontEnd,
    workload: ClientWorkload,
    calibration: Calibration,
    names: Sequence[str],
    max_batch: int,
    mode: str = "scale",
    tolerance: float = DEFAULT_TOLERANCE,
) -> DriftReport:
    """Probe the engines behind ``frontend`` and decide (see :func:`decide`)."""
    steps = await probe_steps(frontend, workload, len(names), max_batch)
    context = probe_context(workload)
    ratios, per_batch, counts = step_ratios(steps, calibration, context, len(names))
    action, factors = decide(ratios, mode, tolerance, names)
    return DriftReport(ratios, per_batch, counts, mode, tolerance, action, factors, context)


def run_drift_probe(
    cfg: ServeConfig,
    workload: ClientWorkload,
    calibration: Calibration,
    mode: str = "scale",
    tolerance: float = DEFAULT_TOLERANCE,
) -> DriftReport:
    """Start the config's engines in crossval workers, probe them and stop them: for tools that start their own
    servers afterwards (the bench). Costs one engine start-up on top of the probe (< 30 s)."""

    async def go() -> DriftReport:
        async with crossval_server(cfg) as frontend:
            cap = min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))
            names = [m.name for m in cfg.models]
            return await probe_drift(frontend, workload, calibration, names, cap, mode, tolerance)

    return asyncio.run(go())
