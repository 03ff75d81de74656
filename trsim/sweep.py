"""Threshold sweeps: a grid of (scenario, concurrency, thresholds) runs, in parallel worker processes or as Ray
tasks (``trsim.parallel``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trcore import ConfigError
from trsim.config import SimConfig
from trsim.driver import simulate
from trsim.parallel import JobRunner, LocalRunner, run_jobs


@dataclass(frozen=True)
class SweepPoint:
    """One run of the grid."""

    scenario: str
    concurrency: int | None  # None: the scenario sets it (an open loop, or phases with their own)
    thresholds: tuple[int, ...]


def concurrency_set_by_scenario(config: SimConfig) -> bool:
    """Whether ``config``'s concurrency comes from its scenario: an open loop, or phases that set their own."""
    return config.workload.arrival != "closed" or any(p.concurrency is not None for p in config.phases)


def _feasibility_bound(config: SimConfig, n: int) -> int:
    """The concurrency the thresholds must not deadlock at: ``n``, or where phases set it the smallest of theirs
    (an open loop keeps ``n``: arrivals do not wait on a full batch of the active requests)."""
    if config.workload.arrival != "closed" or not config.phases:
        return n
    in_force, seen = config.workload.concurrency, []
    for phase in config.phases:  # a phase without one keeps the concurrency in force
        in_force = phase.concurrency or in_force
        seen.append(in_force)
    return min(seen)


def feasible_thresholds(num_models: int, concurrency: int) -> list[tuple[int, ...]]:
    """Every threshold vector with 1 <= B_i <= N and sum(B_i - 1) < N, in lexicographic order."""
    if num_models < 1 or concurrency < 1:
        raise ConfigError("concurrency", f"must be >= 1, got {concurrency}")
    ranges = [range(1, concurrency + 1)] * num_models
    return [b for b in itertools.product(*ranges) if sum(x - 1 for x in b) < concurrency]


def grid(
    configs: Mapping[str, SimConfig],
    concurrencies: Sequence[int],
    thresholds: Sequence[tuple[int, ...]] | None,
    skipped: list[str] | None = None,
) -> list[SweepPoint]:
    """The points of a sweep; ``thresholds=None`` takes every feasible vector at each concurrency.
    Explicit vectors infeasible at some concurrency are skipped there, each said in ``skipped`` (where given). A
    scenario that sets its own concurrency runs once per vector (its points' concurrency is ``None``), its vectors
    feasible at its smallest phase's."""
    points = []
    for name, config in configs.items():
        own = concurrency_set_by_scenario(config)
        for n in [max(concurrencies)] if own else concurrencies:
            bound = _feasibility_bound(config, n)
            vectors = feasible_thresholds(config.num_models, bound) if thresholds is None else thresholds
            for b in vectors:
                if len(b) != config.num_models:
                    raise ConfigError(
                        "thresholds", f"{b} has {len(b)} values; scenario {name!r} has {config.num_models} models"
                    )
                if sum(x - 1 for x in b) < bound:
                    points.append(SweepPoint(name, None if own else n, tuple(b)))
                elif skipped is not None:
                    at = f"its smallest phase's N = {bound}" if own else f"N = {n}"
                    skipped.append(f"{','.join(map(str, b))} skipped for {name} at {at} (sum(B_i - 1) must be < N)")
    if not points:
        raise ConfigError("thresholds", "no feasible threshold vector at the given concurrencies")
    return points


#: Committed tokens per point where none are given and the scenario has no phases to end its run.
DEFAULT_TOKENS = 50_000


def run_point(config: SimConfig, point: SweepPoint, tokens: int | None, warmup_tokens: int = 0) -> dict[str, Any]:
    """Simulate one point for ``tokens`` committed tokens (None: a scenario with phases to its last phase, else
    :data:`DEFAULT_TOKENS`); returns a flat JSON-ready row (``cut_short``: phases the token limit ended early)."""
    if point.concurrency is not None:
        config = config.with_concurrency(point.concurrency)
    cfg = config.with_thresholds(point.thresholds)
    limit = tokens if tokens is not None or config.phases else DEFAULT_TOKENS
    result = simulate(cfg, tokens=limit, warmup_tokens=warmup_tokens)
    row = asdict(point)
    if config.phases:
        row["cut_short"] = any(phase.get("cut_short", False) for phase in result.extra["phases"])
    row["thresholds"] = list(point.thresholds)
    row.update({k: v for k, v in result.to_dict().items() if k not in ("models", "extra")})
    row["busy_fraction"] = [m.busy_fraction for m in result.models]
    row["mean_batch"] = [m.mean_batch for m in result.models]
    return row


def run_sweep(
    configs: Mapping[str, SimConfig],
    points: Iterable[SweepPoint],
    tokens: int | None,
    *,
    jobs: int = 1,
    warmup_tokens: int = 0,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    runner: JobRunner | None = None,
) -> list[dict[str, Any]]:
    """Run every point on ``runner`` (default: ``jobs`` local worker processes; 1 runs in this process) and
    return rows in point order, the same rows wherever the points ran."""
    tasks = [(configs[p.scenario], p, tokens, warmup_tokens) for p in points]
    return run_jobs(runner or LocalRunner(jobs), run_point, tasks, on_done)


def best_thresholds(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int | None], tuple[int, ...]]:
    """Per (scenario, concurrency): the thresholds with the highest simulated throughput (B*)."""
    best: dict[tuple[str, int | None], Mapping[str, Any]] = {}
    for row in rows:
        key = (row["scenario"], row["concurrency"])
        if key not in best or row["throughput_tok_s"] > best[key]["throughput_tok_s"]:
            best[key] = row
    return {key: tuple(row["thresholds"]) for key, row in best.items()}
