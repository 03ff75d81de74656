"""Predicted throughput of each benchmarked system: the throughput model (Markov chain) and the simulator, fed
routing statistics (P, C) and step latencies L_i(b).

P and C come from the server's own counters over measured windows (``trserve.bench.window_stats``).
Latencies come from a calibration profile of this machine when one exists (``calibration/profiles/<tag>/`` or
``calibration/<tag>/``, linear fit; times the drift probe's factor, ``trserve.bench.drift``), else from a
least-squares line through the measured (mean batch, mean step) points of the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trcore.errors import ConfigError, NotIrreducibleError
from trcore.throughput import OptimizeResult, ThroughputModel
from trserve.bench.sim_inputs import PROMPT_TOKENS, SimInputs
from trserve.bench.window_stats import StepStats, pool_stats, routing_matrices
from trserve.crossval.stack import StackCosts
from trserve.engine.emulated import EmulatedLatency
from trserve.hardware import check_profile_hardware
from trserve.model_config import EmulatedConfig
from trserve.paths import calibration_dir
from trsim.baselines import apply_baseline
from trsim.build import markov_config
from trsim.config import PerTokenConfig
from trsim.driver import simulate
from trsim.latency import LatencyModel, ScaledModel, TableModel
from trsim.lengths import constant
from trsim.profile import latency_from_profile, load_profile
from trsim.workload import WorkloadConfig

Matrix = Sequence[Sequence[float]]
Tables = Sequence[Sequence[float]]
#: Context length (tokens) at which profile latencies are read: prompt plus half of a 32-token answer.
BENCH_CONTEXT = 24
#: Time grid of the throughput model: 2 ms keeps N = 16 solvable in seconds (latencies here are 25-85 ms).
QUANTUM_S = 2e-3


def check_one_copy(replicas: Sequence[int]) -> None:
    """The bench's systems, counters and predictions are per model, one copy each; refuse replicas rather than
    read a replica's counters as a model's and predict a pipeline the server does not run."""
    if max(replicas, default=1) > 1:
        raise ConfigError(
            "models.replicas",
            f"tokenrouter bench runs one copy of each model, but the config has replicas {list(replicas)}; "
            "measure replicas with benchmarks/replicas_bench.py",
        )


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Intercept and slope (seconds, seconds per request) of step latency vs batch size."""
    pts = [(b, s) for b, s in points if b > 0 and s > 0]
    if not pts:
        raise ValueError("no measured steps to fit latencies from")
    bs, ss = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    if len(pts) < 2 or np.ptp(bs) < 0.5:
        return float(ss.mean()), 0.0
    slope, intercept = np.polyfit(bs, ss, 1)
    return float(max(intercept, 1e-4)), float(max(slope, 0.0))


def profile_table(
    model_name: str, tag: str, max_batch: int, extend: float = 0.0, factor: float = 1.0
) -> list[float] | None:
    """Step latency by batch size (index b - 1) from this machine's calibration profile of ``model_name``, read
    at the bench's context length with ``extend`` tokens per request fed beyond the decode token (re-admission
    recomputes the partial last KV block: on average half a block), times the drift ``factor``; None when no
    profile is committed."""

    model = profile_model(model_name, tag, factor)
    if model is None:
        return None
    return [float(model.predict(b, b * BENCH_CONTEXT, round(b * extend))) for b in range(1, max_batch + 1)]


def profile_model(model_name: str, tag: str, factor: float = 1.0) -> LatencyModel | None:
    """The fitted latency model of ``model_name``'s profile under ``calibration/profiles/<tag>/`` (or the older
    ``calibration/<tag>/``), checked against this machine, times the drift probe's ``factor``; None when no
    profile is committed."""
    for base in (calibration_dir("profiles", tag), calibration_dir(tag)):
        path = base / f"{model_name}.json"
        if path.is_file():
            model: LatencyModel = latency_from_profile(checked_profile(path))
            return model if factor == 1.0 else ScaledModel(model, factor)
    return None


def checked_profile(path: Path) -> Any:
    """The profile at ``path``, refused when it was measured on other hardware than this machine's."""
    profile = load_profile(path)
    check_profile_hardware(profile.machine.model_dump(), path)
    return profile


def profile_models(
    model_names: Sequence[str], tag: str, factors: Sequence[float] | None = None
) -> list[LatencyModel] | None:
    """Each model's fitted latency model from this machine's profiles (extend-aware: the profiles' preferred fit
    prices appended tokens) times its drift factor, or None when any profile is missing."""
    factors = factors or [1.0] * len(model_names)
    models = [profile_model(name, tag, f) for name, f in zip(model_names, factors, strict=True)]
    return None if any(m is None for m in models) else [m for m in models if m is not None]


def per_token_prediction(
    P: Matrix, C: Matrix, models: Sequence[LatencyModel], concurrency: int, block_size: int, tokens: int
) -> float | None:
    """Simulated throughput of the per-token baseline with the real recompute (the partial KV block after the
    last cached one, at the engines' ``block_size``), priced by the profiles' extend term; None when the latency
    models cannot price it (no extend term)."""
    config = markov_config(P, C, list(models), [1] * len(models), concurrency=concurrency, workload="endless", seed=0)
    try:
        config = replace(config, per_token=PerTokenConfig(block_size=block_size))
        result = simulate(apply_baseline(config, "per-token"), tokens=tokens, warmup_tokens=tokens // 10)
    except ConfigError:
        return None
    return float(result.throughput_tok_s)


def emulated_per_token_prediction(P: Matrix, C: Matrix, tables: Tables, concurrency: int, tokens: int) -> float:
    """Simulated per-token throughput on emulated engines: their steps cost the table's latency whatever is fed
    (the emulated per-token engine charges no recompute), so the simulator's recompute is priced at zero; its
    re-admission and client round-trip costs are the simulator's defaults."""
    latency = [TableModel(list(range(1, len(t) + 1)), list(t)) for t in tables]
    config = markov_config(P, C, latency, [1] * len(tables), concurrency=concurrency, workload="endless", seed=0)
    config = replace(config, per_token=PerTokenConfig(recompute_s_per_token=0.0))
    result = simulate(apply_baseline(config, "per-token"), tokens=tokens, warmup_tokens=tokens // 10)
    return float(result.throughput_tok_s)


def emulated_tables(base: Mapping[str, Any], names: Sequence[str], max_batch: int) -> list[list[float]] | None:
    """Mean step latency by batch size of the named models of a ``backend: emulated`` config (the latencies the
    engines are given, so predictions from them are out-of-sample by construction); None for other backends."""
    if base.get("backend") != "emulated":
        return None
    by_name = {m["name"]: m for m in base["models"]}
    return [EmulatedLatency.from_config(EmulatedConfig.model_validate(by_name[n]["emulated"])).table(max_batch)
            for n in names]  # fmt: skip


def line_table(line: tuple[float, float], max_batch: int) -> list[float]:
    intercept, slope = line
    return [intercept + slope * b for b in range(1, max_batch + 1)]


def model_prediction(P: Matrix, C: Matrix, tables: Tables, concurrency: int, thresholds: Sequence[int]) -> float | None:
    """Throughput (tok/s) the Markov-chain model gives ``thresholds`` at ``concurrency``; None when the routing
    statistics make the chain reducible (e.g. a large model that never hands back): it has no single value."""

    cut = [t[:concurrency] for t in tables]
    try:
        result = ThroughputModel(P, C, cut, quantum_s=QUANTUM_S).solve(concurrency, list(thresholds))
    except NotIrreducibleError:
        return None
    return float(result.throughput_tok_s)


def own_routing_prediction(
    stats: Sequence[list[StepStats]], tables: Tables, concurrency: int, thresholds: Sequence[int]
) -> float | None:
    """The model fed one cell's own routing statistics (P and C of its windows, pooled): how much of the cell's
    distance to the prediction is its windows' routing drawing more or fewer large-model tokens than the learned
    chain. In-sample: a diagnosis, never a result. None without windows or for one model."""
    if not stats or len(stats[0]) < 2:
        return None
    P, C = routing_matrices(pool_stats(stats))
    return model_prediction(P, C, tables, concurrency, thresholds)


#: A delayed-batching vector is used only when the model predicts it beats B = 1 by more than this (the model's
#: own error on this machine is several percent; see ``ThroughputModel.optimize``).
MIN_GAIN = 0.03


def optimize_table(
    P: Matrix, C: Matrix, tables: Tables, concurrencies: Sequence[int], min_gain: float = MIN_GAIN
) -> dict[int, OptimizeResult]:
    """The optimizer's result for every concurrency: ``thresholds`` is B* under ``min_gain``, ``candidates``
    hold every feasible vector's predicted throughput (B = 1 and the unconstrained best among them)."""

    return {
        # auto: the exact chain while it stays small, a race of sampled estimates beyond (N = 32, 64 at GPU speed)
        n: ThroughputModel(P, C, [t[:n] for t in tables], quantum_s=QUANTUM_S).optimize(
            n, min_gain=min_gain, method="auto"
        )
        for n in concurrencies
    }


def unconstrained_best(result: OptimizeResult) -> tuple[list[int], float]:
    """The best vector among ``result``'s candidates regardless of ``min_gain``, and its predicted gain over
    B = 1."""
    best = max(result.candidates, key=lambda c: c.throughput_tok_s)
    ones = next(c for c in result.candidates if max(c.thresholds) == 1)
    return list(best.thresholds), best.throughput_tok_s / ones.throughput_tok_s - 1.0


def sim_prediction(
    P: Matrix,
    C: Matrix,
    tables: Tables,
    concurrency: int,
    thresholds: Sequence[int],
    baseline: str,
    tokens: int,
    stack: StackCosts | None = None,
    output_tokens: int | None = None,
    inputs: SimInputs | None = None,
) -> float:
    """Throughput (tok/s) of the SimPy simulator for ``baseline`` (a ``trsim.baselines`` name); with ``stack``, the
    serving stack's measured costs added (each step's host gap, each hand-off's transit). Requests never end and
    memory is free, unless ``output_tokens`` is given (each session's requests write that many tokens) or
    ``inputs`` (a bench cell's own request lengths and KV pools, ``trserve.bench.sim_inputs``); then the next
    request starts after the stack's client turnaround (the closed loop of a bench's clients)."""

    latency = [TableModel(list(range(1, len(t) + 1)), list(t)) for t in tables]
    workload: WorkloadConfig | str = "endless"
    turnaround = stack.client_turnaround_s if stack is not None else 0.0
    if inputs is not None:
        workload = inputs.workload(turnaround)
    elif output_tokens is not None:
        workload = WorkloadConfig(prompt_tokens=constant(PROMPT_TOKENS), output_tokens=constant(output_tokens),
                                  think_time_s=turnaround)  # fmt: skip
    config = markov_config(P, C, latency, thresholds, concurrency=concurrency, workload=workload, seed=0)
    if stack is not None:
        config = replace(config, **stack.sim_fields())
    if inputs is not None and inputs.kv is not None:
        config = replace(config, kv=inputs.kv)
    result = simulate(apply_baseline(config, baseline), tokens=tokens, warmup_tokens=tokens // 10)
    return float(result.throughput_tok_s)
