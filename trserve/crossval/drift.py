"""The drift probe on real engines (its decision half, what ``scale``, ``stop``, ``report`` and ``skip`` do, is
``trserve.server.drift``): before a tool predicts from calibration profiles, time each engine at a few batch
sizes and compare with its profile (profiles drift between machines of one kind, and with load on a shared
machine).

The probe runs on the crossval workers (the server's own processes): for each model, every request is routed to
that model (a Markov router whose every row sends all steps there; the entry model still prefills) at a few
concurrencies, for a couple of seconds each, and the pure decode steps (one fed token per request) are compared
with the profile at the same batch size and the workload's typical context.

That times each engine alone. Serving does not run it alone: on a machine whose CPUs run both engines, the front
end and the client, every step meets the others' work (on the 2-core machine the engines stepped at 0.62x /
0.56x their profiles while serving, against 0.54x / 0.55x alone). A ``serving`` probe (``placement``; the
default ``auto`` picks it where the engines compute on the stack's CPUs) runs the config's own routing instead,
every engine stepping and the front end streaming at the same concurrencies, and reads the same decode steps from
that, and the steps that append a hand-off's few tokens where the profile prices appended tokens (R2R's large model
makes no other); a model left with fewer than :data:`MIN_SERVING_STEPS` such steps is timed alone as well. On GPUs
(each engine on its own devices) ``auto`` keeps the alone probe.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, get_args

from trcore import BatchingPolicy
from trcore.errors import ConfigError
from trserve.config import DriftProbePlacement, ServeConfig
from trserve.crossval.harness import ClientWorkload, CrossvalFrontEnd, StepRecord, crossval_server, run_cell
from trserve.crossval.messages import ProgramChoice
from trserve.crossval.predict import Calibration
from trserve.crossval.workloads import make_workload
from trserve.server.drift import DEFAULT_TOLERANCE, DriftMeasurement, DriftReport, assess

#: Concurrencies of the probe (batch sizes the decode steps then run at) and its window per concurrency.
PROBE_CONCURRENCIES = (1, 2, 4)
#: Where the probe times the engines: ``alone`` (every step routed to one engine in turn, the others idle) or
#: ``serving`` (the config's own routing, every engine stepping and the front end streaming at once: the
#: interference serving meets on a machine whose CPUs run the engines and the stack); ``auto``: serving where the
#: engines compute on the stack's CPUs (``backend: vllm`` with no model on GPUs), alone elsewhere.
PROBE_PLACEMENTS: tuple[str, ...] = get_args(DriftProbePlacement)
#: A serving probe that leaves a model fewer decode steps than this times that model alone as well.
MIN_SERVING_STEPS = 20
#: A serving probe also reads steps that append up to this many tokens per request on average (hand-offs).
MAX_APPEND_PER_REQUEST = 8
PROBE_WARMUP_S = 0.5
PROBE_MEASURE_S = 2.0
PROBE_MAX_TOKENS = 32


def step_ratios(
    steps: Sequence[StepRecord], calibration: Calibration, context: int, num_models: int, appends: bool = False
) -> DriftMeasurement:
    """Per model: median ratio of observed to profile step time over pure decode steps (every request fed one
    token) at ``context`` tokens per request, the median per batch size, and how many steps it rests on (a model
    with no such step gets ratio 1.0 and 0 steps). With ``appends``, steps that also read a few tokens per request
    (at most :data:`MAX_APPEND_PER_REQUEST` on average: a hand-off's, not a prompt's) count too where the model's
    profile prices them, each against the profile at its fed tokens."""
    ratios, per_batch, counts = [], [], []
    for m in range(num_models):
        latency = calibration.latency[m]
        limit = MAX_APPEND_PER_REQUEST if appends and getattr(latency, "prices_extend", False) else 0
        by_batch: dict[int, list[float]] = {}
        for s in steps:
            extend = s.num_new_tokens - s.batch_size
            if s.model == m and s.batch_size > 0 and 0 <= extend <= limit * s.batch_size:
                predicted = float(latency.predict(s.batch_size, s.batch_size * context, extend))
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


def serving_probe(cfg: ServeConfig, placement: str, program: ProgramChoice | None = None) -> ProgramChoice | None:
    """The routing program a ``serving`` probe runs (``program``, else the config's own), or None for an ``alone``
    probe; ``auto`` decides by where the engines compute (see :data:`PROBE_PLACEMENTS`)."""
    if placement not in PROBE_PLACEMENTS:
        raise ConfigError("drift_probe", f"unknown placement {placement!r}; valid: {', '.join(PROBE_PLACEMENTS)}")
    shared_cpu = cfg.backend == "vllm" and not any(m.placement.gpus for m in cfg.models)
    if placement == "alone" or (placement == "auto" and not shared_cpu) or cfg.num_models < 2:
        return None
    return program if program is not None else ProgramChoice.of(cfg.router.program, cfg.router.params)


async def probe_steps(
    frontend: CrossvalFrontEnd,
    workload: ClientWorkload,
    num_models: int,
    max_batch: int,
    serving: ProgramChoice | None = None,
    models: Sequence[int] | None = None,
    max_tokens: int = PROBE_MAX_TOKENS,
    label: str = "probe",
) -> list[StepRecord]:
    """Run the probe cells on a server that holds no request; returns their in-window steps. With ``serving``
    (a routing program) every engine steps at once under that program's routing, at each probe concurrency;
    else each of ``models`` (default: all) alone in turn. Each request writes ``max_tokens`` tokens; ``label``
    starts the cells' tags (request ids must not repeat on one server start)."""
    short = replace(
        workload, max_tokens=max_tokens, output_lengths=(), warmup_s=PROBE_WARMUP_S, measure_s=PROBE_MEASURE_S
    )
    policies = [BatchingPolicy(threshold=1, max_wait_s=None, max_batch=max_batch)] * num_models
    steps: list[StepRecord] = []
    if serving is not None:
        for n in PROBE_CONCURRENCIES:
            run = await run_cell(frontend, lambda m: serving, policies, n, short, f"{label}-serving-n{n}")
            steps.extend(run.steps)
        return steps
    for m in models if models is not None else range(num_models):
        for n in PROBE_CONCURRENCIES:
            run = await run_cell(frontend, probe_program(m, num_models), policies, n, short, f"{label}-m{m}-n{n}")
            steps.extend(run.steps)
    return steps


def probe_context(workload: ClientWorkload, max_tokens: int = PROBE_MAX_TOKENS) -> int:
    """Mean context of a probe decode step: mean prompt plus half the probe's output."""
    return max(1, round(sum(map(len, workload.prompts)) / len(workload.prompts) + max_tokens / 2))


async def measure_on(
    frontend: CrossvalFrontEnd,
    workload: ClientWorkload,
    calibration: Calibration,
    num_models: int,
    max_batch: int,
    serving: ProgramChoice | None = None,
) -> DriftMeasurement:
    """Probe the engines behind ``frontend`` (a server that holds no request) against ``calibration``, alone or
    ``serving`` (:func:`probe_steps`); the measurement records which."""
    context = probe_context(workload)
    steps = await probe_steps(frontend, workload, num_models, max_batch, serving)
    measured = step_ratios(steps, calibration, context, num_models, appends=serving is not None)
    if serving is None:
        return measured
    rare = [m for m, n in enumerate(measured.num_steps) if n < MIN_SERVING_STEPS]
    if rare:  # the routing seldom decodes there: those models are timed alone
        alone = step_ratios(await probe_steps(frontend, workload, num_models, max_batch, None, rare), calibration,
                            context, num_models)  # fmt: skip
        measured = merge_models(measured, alone, rare)
    return replace(measured, placement="serving" if not rare else f"serving (alone: models {rare})")


def merge_models(base: DriftMeasurement, other: DriftMeasurement, models: Sequence[int]) -> DriftMeasurement:
    """``base`` with ``models``' entries taken from ``other``."""
    pick = [other if m in models else base for m in range(len(base.ratios))]
    return replace(base, ratios=[p.ratios[m] for m, p in enumerate(pick)],
                   per_batch=[p.per_batch[m] for m, p in enumerate(pick)],
                   num_steps=[p.num_steps[m] for m, p in enumerate(pick)])  # fmt: skip


async def probe_drift(
    frontend: CrossvalFrontEnd,
    workload: ClientWorkload,
    calibration: Calibration,
    names: Sequence[str],
    max_batch: int,
    mode: str = "scale",
    tolerance: float = DEFAULT_TOLERANCE,
    serving: ProgramChoice | None = None,
) -> DriftReport:
    """Probe the engines behind ``frontend`` and decide (see :func:`trserve.server.drift.decide`)."""
    measured = await measure_on(frontend, workload, calibration, len(names), max_batch, serving)
    return assess(measured, mode, tolerance, names)


def probe_config(cfg: ServeConfig) -> ServeConfig:
    """``cfg`` as the probe's server runs it: no ``auto`` thresholds to resolve (each probe cell sets its own)."""
    return cfg.model_copy(update={"batching": cfg.batching.model_copy(update={"thresholds": None})})


def measure_drift(
    cfg: ServeConfig, workload: ClientWorkload, calibration: Calibration, placement: str = "auto"
) -> DriftMeasurement:
    """Start the config's engines in crossval workers, probe them (``placement``: :data:`PROBE_PLACEMENTS`) and
    stop them: for tools that start their own servers afterwards (the bench, ``thresholds: auto``). Costs one
    engine start-up on top of the probe (about 15 s for two models). Runs in a thread of its own when called from
    a running event loop."""
    serving = serving_probe(cfg, placement)
    cfg = probe_config(cfg)

    async def go() -> DriftMeasurement:
        async with crossval_server(cfg) as frontend:
            cap = min(cfg.batching.max_batch or 10**9, *(m.max_num_seqs for m in cfg.models))
            return await measure_on(frontend, workload, calibration, cfg.num_models, cap, serving)

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
    placement: str = "auto",
) -> DriftReport:
    """:func:`measure_drift` and decide (raises for ``stop`` beyond the tolerance)."""
    measured = measure_drift(cfg, workload, calibration, placement)
    return assess(measured, mode, tolerance, [m.name for m in cfg.models])


def probe_workload(cfg: ServeConfig) -> ClientWorkload:
    """The probe's requests: the ``fixed`` crossval workload's chat prompts (30-50 tokens), 32 output tokens."""
    return make_workload("fixed", cfg, PROBE_MAX_TOKENS, PROBE_WARMUP_S, PROBE_MEASURE_S)


def serve_drift_probe(cfg: ServeConfig, models: Sequence[Any]) -> DriftMeasurement:
    """The probe ``thresholds: auto`` runs before the optimizer (a :data:`trserve.server.drift.DriftProbe`, which
    the CLI injects into ``tokenrouter serve``): the config's engines against ``models`` (the profiles' latency
    models, one per config model)."""
    paths = tuple(f"profile of {m.name}" for m in cfg.models)
    auto = cfg.batching.auto
    placement = auto.drift_probe if auto is not None else "auto"
    return measure_drift(cfg, probe_workload(cfg), Calibration(paths, tuple(models)), placement)
