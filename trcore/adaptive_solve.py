"""One solve of the adaptive controller (:func:`solve`), picklable (:class:`SolveJob`) so that a driver can run it
in another process: the throughput model on a window's inputs, over the grid past ``max_candidates`` vectors."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice, product
from typing import TYPE_CHECKING

from trcore.adaptive_config import AdaptiveConfig, Retune
from trcore.adaptive_window import WindowEstimate
from trcore.policy import policies_for

if TYPE_CHECKING:
    from trcore.throughput import ThroughputModel


@dataclass(frozen=True)
class SolveJob:
    """What one solve needs (picklable, so it can run in another process): the knobs, the vector in force and
    the caps, the window's inputs, the time it was planned, and whether the inputs moved enough to solve."""

    config: AdaptiveConfig
    thresholds: tuple[int, ...]
    max_batch: tuple[int, ...]
    inputs: WindowEstimate
    time_s: float
    fresh: bool


def solve(job: SolveJob) -> Retune:
    """Optimize on the job's inputs (over the grid past ``max_candidates`` vectors), and solve the vector in
    force (as clamped at that concurrency); where the best batches more on some model than the vector in force
    and beats it by ``min_gain``, both again on the tables within the window's spread (:func:`worst_gain`)."""
    # numpy and scipy: only when solving
    from trcore.throughput import SamplingConfig, ThroughputModel, feasible_thresholds, optimize_on_grid

    cfg, inputs, n = job.config, job.inputs, job.inputs.concurrency
    quantum = min(min(row) for row in inputs.latency_s) * cfg.quantum_fraction

    def model_on(tables: Sequence[Sequence[float]]) -> ThroughputModel:
        return ThroughputModel(
            inputs.P,
            inputs.routing.C,
            [list(row) for row in tables],
            quantum_s=quantum,
            max_batch=list(job.max_batch),
            sampling=SamplingConfig(seed=cfg.seed, rel_std_error=sampling_precision(cfg.min_gain)),
        )

    model = model_on(inputs.latency_s)
    current = in_force(job.thresholds, n)
    many = next(islice(feasible_thresholds(model.spec.batch_caps(n), n), cfg.max_candidates, None), None)
    if many is not None:
        best = optimize_on_grid(model, n, keep=[current], min_gain=cfg.min_gain, method=cfg.method)
    else:
        best = model.optimize(n, min_gain=cfg.min_gain, method=cfg.method)
    if current == best.thresholds:
        current_tok_s = best.throughput_tok_s
    else:
        current_tok_s = model.solve(n, current, method=cfg.method).throughput_tok_s
    found, tok_s = best.thresholds, best.throughput_tok_s
    worst = None
    # Only a switch that batches more and clears min_gain on the fitted tables is due to be checked on the others.
    batches_more = any(b > c for b, c in zip(found, current, strict=True))
    if batches_more and tok_s > current_tok_s * (1 + cfg.min_gain):
        worst = worst_gain(inputs, lambda tables: _gain(model_on(tables), n, found, current, cfg.method))
    solved = len(best.candidates)
    return Retune(
        job.time_s, job.thresholds, found, tok_s, current_tok_s, False, "", best.method, inputs, solved, worst
    )  # fmt: skip


def worst_gain(inputs: WindowEstimate, gain: Callable[[Sequence[Sequence[float]]], float]) -> float | None:
    """The least ``gain`` over the tables that take each fitted model's flat or steep line (every combination;
    None without fitted tables or where every line is exact)."""
    if inputs.flat_s is None or inputs.steep_s is None or inputs.flat_s == inputs.steep_s:
        return None
    pairs = zip(inputs.flat_s, inputs.steep_s, strict=True)
    choices = [(flat, steep) if flat != steep else (flat,) for flat, steep in pairs]
    return min(gain(tables) for tables in product(*choices))


def _gain(model: ThroughputModel, n: int, new: tuple[int, ...], old: tuple[int, ...], method: str) -> float:
    before = model.solve(n, old, method=method).throughput_tok_s
    return model.solve(n, new, method=method).throughput_tok_s / before - 1.0 if before > 0 else math.inf


def sampling_precision(min_gain: float) -> float:
    """The sampled method's relative standard error for a controller: a quarter of ``min_gain`` tells a gain worth
    switching for (at least the optimizer's 0.15%, at most 0.5%: a tighter race costs CPU it does not need)."""
    return min(max(min_gain / 4, 0.0015), 0.005)


def in_force(thresholds: Sequence[int], num_active: int) -> tuple[int, ...]:
    """The thresholds the policies apply at ``num_active`` active requests (clamped to stay feasible)."""
    return tuple(p.threshold_for(num_active) for p in policies_for(thresholds))
