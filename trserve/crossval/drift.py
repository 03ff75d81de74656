"""The drift probe on real engines (its decision half, what ``scale``, ``stop``, ``report`` and ``skip`` do, is
``trserve.server.drift``): before a tool predicts from calibration profiles, time each engine at a few batch
sizes and compare with its profile (profiles drift between machines of one kind, and with load on a shared
machine).

The probe runs on the crossval workers (the server's own processes): for each model, every request is routed to
that model (a Markov router whose every row sends all steps there; the entry model still prefills) at a few
concurrencies, for a couple of seconds each, and the pure decode steps (one fed token per request) are compared
with the profile at the same batch size and the workload's typical context.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from trcore import BatchingPolicy
from trserve.config import ServeConfig
from trserve.crossval.harness import ClientWorkload, CrossvalFrontEnd, StepRecord, crossval_server, run_cell
from trserve.crossval.messages import ProgramChoice
from trserve.crossval.predict import Calibration
from trserve.crossval.workloads import make_workload
from trserve.server.drift import DEFAULT_TOLERANCE, DriftMeasurement, DriftReport, assess

#: Concurrencies of the probe (batch sizes the decode steps then run at) and its window per concurrency.
PROBE_CONCURRENCIES = (1, 2, 4)
PROBE_WARMUP_S = 0.5
PROBE_MEASURE_S = 2.0
PROBE_MAX_TOKENS = 32


def step_ratios(
    steps: Sequence[StepRecord], calibration: Calibration, context: int, num_models: int
) -> DriftMeasurement:
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
    return DriftMeasurement(ratios, per_batch, counts, context)


def probe_program(target: int, num_models: int) -> Callable[[int], ProgramChoice]:
    """Programs that send every step of every request to ``target`` (its tokens kept)."""
    P = [[1.0 if j == target else 0.0 for j in range(num_models)] for _ in range(num_models)]
    C = [[1.0] * num_models for _ in range(num_models)]
    return lambda m: ProgramChoice.of("markov", {"P": P, "C": C, "seed": 0})


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


async def measure_on(
    frontend: CrossvalFrontEnd, workload: ClientWorkload, calibration: Calibration, num_models: int, max_batch: int
) -> DriftMeasurement:
    """Probe the engines behind ``frontend`` (a server that holds no request) against ``calibration``."""
    steps = await probe_steps(frontend, workload, num_models, max_batch)
    return step_ratios(steps, calibration, probe_context(workload), num_models)


async def probe_drift(
    frontend: CrossvalFrontEnd,
    workload: ClientWorkload,
    calibration: Calibration,
    names: Sequence[str],
    max_batch: int,
    mode: str = "scale",
    tolerance: float = DEFAULT_TOLERANCE,
) -> DriftReport:
    """Probe the engines behind ``frontend`` and decide (see :func:`trserve.server.drift.decide`)."""
    measured = await measure_on(frontend, workload, calibration, len(names), max_batch)
    return assess(measured, mode, tolerance, names)


def probe_config(cfg: ServeConfig) -> ServeConfig:
    """``cfg`` as the probe's server runs it: no ``auto`` thresholds to resolve (each probe cell sets its own)."""
    return cfg.model_copy(update={"batching": cfg.batching.model_copy(update={"thresholds": None})})


def measure_drift(cfg: ServeConfig, workload: ClientWorkload, calibration: Calibration) -> DriftMeasurement:
    """Start the config's engines in crossval workers, probe them and stop them: for tools that start their own
    servers afterwards (the bench, ``thresholds: auto``). Costs one engine start-up on top of the probe (about
    15 s for two models). Runs in a thread of its own when called from a running event loop."""
    cfg = probe_config(cfg)

    async def go() -> DriftMeasurement:
        async with crossval_server(cfg) as frontend:
            cap = min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))
            return await measure_on(frontend, workload, calibration, cfg.num_models, cap)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(go())
    with ThreadPoolExecutor(1, thread_name_prefix="drift-probe") as pool:
        return pool.submit(asyncio.run, go()).result()


def run_drift_probe(
    cfg: ServeConfig,
    workload: ClientWorkload,
    calibration: Calibration,
    mode: str = "scale",
    tolerance: float = DEFAULT_TOLERANCE,
) -> DriftReport:
    """:func:`measure_drift` and decide (raises for ``stop`` beyond the tolerance)."""
    return assess(measure_drift(cfg, workload, calibration), mode, tolerance, [m.name for m in cfg.models])


def probe_workload(cfg: ServeConfig) -> ClientWorkload:
    """The probe's requests: the ``fixed`` crossval workload's chat prompts (30-50 tokens), 32 output tokens."""
    return make_workload("fixed", cfg, PROBE_MAX_TOKENS, PROBE_WARMUP_S, PROBE_MEASURE_S)


def serve_drift_probe(cfg: ServeConfig, models: Sequence[Any]) -> DriftMeasurement:
    """The probe ``thresholds: auto`` runs before the optimizer (a :data:`trserve.server.drift.DriftProbe`, which
    the CLI injects into ``tokenrouter serve``): the config's engines against ``models`` (the profiles' latency
    models, one per config model)."""
    paths = tuple(f"profile of {m.name}" for m in cfg.models)
    return measure_drift(cfg, probe_workload(cfg), Calibration(paths, tuple(models)))
