"""Routing statistics from recorded traces: transition matrix P, committed tokens C, run lengths per model.

A trace is one request's routing decisions in order, each ``(model, destination, kept)``: the model that
stepped, where the request went next, and whether the sampled token was committed (0/1). That is the
``steps`` list of the JSONL trace format (``{"request_id": str, "steps": [[model, destination, kept], ...]}``).
The estimates feed the throughput model (P, C) and show how far real routing is from its stationary,
memoryless assumption (run lengths: geometric under a Markov router).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trcore.errors import ConfigError

#: One routing decision: (model that stepped, destination, kept as 0/1 or bool).
TraceStep = Sequence[int]


class HasSteps(Protocol):
    """A parsed trace object (such as ``trcore.traces.RequestTrace``): its steps in order."""

    @property
    def steps(self) -> Sequence[TraceStep]: ...


#: What the estimator accepts per request: a step list, a JSON trace record, or a parsed trace.
TraceLike = Sequence[TraceStep] | Mapping[str, Any] | HasSteps


@dataclass(frozen=True)
class RunLengths:
    """How many consecutive steps requests stayed on one model.

    ``counts[k]`` is the number of complete runs of ``k`` steps (the k-th step decided to leave);
    ``censored[k]`` counts runs cut short by the end of the request after ``k`` steps that all decided to
    stay (so the router's run would have lasted more than ``k``).
    """

    counts: Mapping[int, int]
    censored: Mapping[int, int]

    @property
    def num_runs(self) -> int:
        return sum(self.counts.values())

    @property
    def num_censored(self) -> int:
        return sum(self.censored.values())

    @property
    def mean(self) -> float:
        """Mean length of complete runs (NaN when there are none)."""
        n = self.num_runs
        return sum(k * c for k, c in self.counts.items()) / n if n else math.nan

    @property
    def censored_mean(self) -> float:
        """Geometric maximum-likelihood mean that also uses censored runs: steps / complete runs
        (equals ``1 / (1 - P[m][m])`` when the traces are consistent)."""
        steps = sum(k * c for k, c in self.counts.items()) + sum(k * c for k, c in self.censored.items())
        return steps / self.num_runs if self.num_runs else math.nan

    def fraction(self, length: int) -> float:
        """Share of complete runs that lasted exactly ``length`` steps."""
        return self.counts.get(length, 0) / self.num_runs if self.num_runs else math.nan


@dataclass(frozen=True)
class RoutingStats:
    """Estimates from traces, with the counts behind them so their confidence can be judged.

    ``P[i][j]`` is the share of steps on model ``i`` that sent the request to ``j``; a model that never
    stepped gets a self-loop row (listed in ``unvisited``). ``C[i][j]`` is the mean of ``kept`` over those
    transitions (expected committed tokens); 1.0 where a transition was never seen (as MarkovRouter's
    default), which the throughput model multiplies by ``P[i][j] = 0`` anyway.
    """

    num_models: int
    num_requests: int
    transition_counts: tuple[tuple[int, ...], ...]
    kept_counts: tuple[tuple[int, ...], ...]
    P: tuple[tuple[float, ...], ...]
    C: tuple[tuple[float, ...], ...]
    run_lengths: tuple[RunLengths, ...]
    unvisited: tuple[int, ...]

    @property
    def num_steps(self) -> int:
        return sum(map(sum, self.transition_counts))

    def p_stderr(self, i: int, j: int) -> float:
        """Binomial standard error of ``P[i][j]`` (NaN for a model that never stepped)."""
        n = sum(self.transition_counts[i])
        p = self.P[i][j]
        return math.sqrt(p * (1.0 - p) / n) if n else math.nan

    def c_stderr(self, i: int, j: int) -> float:
        """Binomial standard error of ``C[i][j]`` (NaN for a transition never seen)."""
        n = self.transition_counts[i][j]
        c = self.C[i][j]
        return math.sqrt(c * (1.0 - c) / n) if n else math.nan

    def geometric_mean_run(self, model: int) -> float:
        """Mean run length on ``model`` if routing were memoryless with this P: ``1 / (1 - P[m][m])``."""
        stay = self.P[model][model]
        return math.inf if stay >= 1.0 else 1.0 / (1.0 - stay)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (run-length histograms keyed by length as strings)."""
        return {
            "num_models": self.num_models,
            "num_requests": self.num_requests,
            "num_steps": self.num_steps,
            "P": [list(row) for row in self.P],
            "C": [list(row) for row in self.C],
            "transition_counts": [list(row) for row in self.transition_counts],
            "kept_counts": [list(row) for row in self.kept_counts],
            "unvisited": list(self.unvisited),
            "run_lengths": [
                {
                    "counts": {str(k): v for k, v in sorted(r.counts.items())},
                    "censored": {str(k): v for k, v in sorted(r.censored.items())},
                    "mean": r.mean,
                    "geometric_mean": self.geometric_mean_run(m),
                }
                for m, r in enumerate(self.run_lengths)
            ],
        }


def estimate_routing_stats(
    traces: Iterable[TraceLike],
    num_models: int | None = None,
    *,
    entry_model: int | None = None,
) -> RoutingStats:
    """Estimate P, C and run lengths from traces: step lists, JSON trace records (with a ``steps`` key) or
    parsed traces (objects with a ``steps`` attribute, such as ``trcore.traces.RequestTrace``).

    ``num_models`` defaults to one more than the largest model index seen. ``entry_model``: in a closed
    loop a finished request is replaced by a new one at the entry model, so pass it to count each
    request's last step as a transition there instead of the destination recorded by the router.
    """
    step_lists = [_steps_of(t) for t in traces]
    size = num_models if num_models is not None else _infer_num_models(step_lists)
    counts = [[0] * size for _ in range(size)]
    kept = [[0] * size for _ in range(size)]
    for steps in step_lists:
        for k, (model, dest, is_kept) in enumerate(_checked(steps, size)):
            if entry_model is not None and k == len(steps) - 1:
                dest = entry_model
            counts[model][dest] += 1
            kept[model][dest] += is_kept
    return stats_from_counts(counts, kept, len(step_lists), _run_lengths(step_lists, size))


def stats_from_counts(
    counts: Sequence[Sequence[int]],
    kept: Sequence[Sequence[int]],
    num_requests: int = 0,
    run_lengths: Sequence[RunLengths] | None = None,
) -> RoutingStats:
    """The estimates from counts already tallied: ``counts[i][j]`` steps on ``i`` that went on to ``j``,
    ``kept[i][j]`` of them committed their token (a live window of step reports, where no per-request trace
    is kept; ``run_lengths`` then default to empty)."""
    size = len(counts)
    if size == 0 or any(len(row) != size for row in counts) or [len(r) for r in kept] != [size] * size:
        raise ConfigError("counts", f"transition and kept counts must both be square, one row per model ({size})")
    return RoutingStats(
        num_models=size,
        num_requests=num_requests,
        transition_counts=tuple(tuple(int(n) for n in row) for row in counts),
        kept_counts=tuple(tuple(int(k) for k in row) for row in kept),
        P=tuple(_p_row(i, counts[i]) for i in range(size)),
        C=tuple(tuple(k / n if n else 1.0 for k, n in zip(kept[i], counts[i], strict=True)) for i in range(size)),
        run_lengths=tuple(run_lengths) if run_lengths is not None else tuple(RunLengths({}, {}) for _ in range(size)),
        unvisited=tuple(i for i in range(size) if not any(counts[i])),
    )


def _steps_of(trace: TraceLike) -> Sequence[TraceStep]:
    if isinstance(trace, Mapping):
        if "steps" not in trace:
            raise ConfigError("trace", f"record {trace.get('request_id', '?')!r} has no 'steps' list")
        steps: Sequence[TraceStep] = trace["steps"]
        return steps
    if isinstance(trace, Sequence):
        return trace
    return trace.steps


def _infer_num_models(step_lists: Sequence[Sequence[TraceStep]]) -> int:
    largest = max((max(s[0], s[1]) for steps in step_lists for s in steps), default=-1)
    if largest < 0:
        raise ConfigError("traces", "no routing steps recorded; cannot infer the number of models")
    return largest + 1


def _checked(steps: Sequence[TraceStep], size: int) -> Iterable[tuple[int, int, int]]:
    for step in steps:
        if len(step) != 3:
            raise ConfigError("trace", f"step {list(step)} must be [model, destination, kept]")
        model, dest, is_kept = int(step[0]), int(step[1]), int(step[2])
        if not (0 <= model < size and 0 <= dest < size):
            raise ConfigError("trace", f"step {list(step)} names a model outside 0..{size - 1}")
        if is_kept not in (0, 1):
            raise ConfigError("trace", f"step {list(step)}: kept must be 0 or 1")
        yield model, dest, is_kept


def _p_row(model: int, row: Sequence[int]) -> tuple[float, ...]:
    total = sum(row)
    if not total:
        return tuple(1.0 if j == model else 0.0 for j in range(len(row)))
    return tuple(n / total for n in row)


def _run_lengths(step_lists: Sequence[Sequence[TraceStep]], size: int) -> tuple[RunLengths, ...]:
    # A run ends with a decision to leave; one still going when the request ends (or, in an inconsistent
    # trace, when the next step is on another model without a leave) is censored.
    complete: list[Counter[int]] = [Counter() for _ in range(size)]
    censored: list[Counter[int]] = [Counter() for _ in range(size)]
    for steps in step_lists:
        model, length = -1, 0
        for step in steps:
            if length and int(step[0]) != model:
                censored[model][length] += 1
                length = 0
            model, length = int(step[0]), length + 1
            if int(step[1]) != model:
                complete[model][length] += 1
                length = 0
        if length:
            censored[model][length] += 1
    return tuple(RunLengths(dict(c), dict(z)) for c, z in zip(complete, censored, strict=True))
