"""One model's counters over measured windows, and the routing statistics (P, C) the predictions read from them.

Per model: request-steps ``S`` (sum of batch sizes), hand-offs ``H``, committed tokens ``T`` and requests ended
``F`` (their last token committed there). A request stays with probability ``1 - H/S`` and commits one token then;
the tokens a hand-off commits follow from the rest: ``c_ij = (T - (S - H)) / H``. The throughput model's requests
never end: a request that ends is replaced on the entry model, so an end on the other model counts as a move to
the entry model with its token kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trcore.errors import ConfigError
from trserve.bench.client import metric_delta

#: Predictions estimate routing statistics for at most this many models (see :func:`check_num_models`).
MAX_PREDICTED_MODELS = 2


@dataclass(frozen=True)
class StepStats:
    """One model's counters over one window."""

    request_steps: float
    steps: float
    step_seconds: float
    handoffs: float
    tokens: float
    #: Requests whose last token this model's steps committed (0 from counters that predate it).
    finishes: float = 0.0

    @property
    def mean_batch(self) -> float:
        return self.request_steps / self.steps if self.steps else 0.0

    @property
    def mean_step_s(self) -> float:
        return self.step_seconds / self.steps if self.steps else 0.0


def step_stats(after: str, before: str, names: Sequence[str]) -> list[StepStats]:
    """Per model (in ``names`` order) counters between two ``/metrics`` texts."""
    fields = ("tokenrouter_batch_size_sum", "tokenrouter_steps_total", "tokenrouter_step_seconds_sum",
              "tokenrouter_handoffs_total", "tokenrouter_tokens_total", "tokenrouter_finished_total")  # fmt: skip
    deltas = [metric_delta(after, before, f) for f in fields]
    return [StepStats(*(d.get(n, 0.0) for d in deltas)) for n in names]


def check_num_models(num_models: int) -> None:
    """Predictions estimate P and C for one model or a pair (each model's only peer is the other one); refuse
    more models rather than predict them wrongly."""
    if num_models > MAX_PREDICTED_MODELS:
        raise ConfigError(
            "models",
            f"bench predictions support at most {MAX_PREDICTED_MODELS} models (P and C are estimated for a pair), "
            f"but the config has {num_models}; bench a two-model config",
        )


def routing_matrices(stats: Sequence[StepStats], entry: int = 0) -> tuple[list[list[float]], list[list[float]]]:
    """P and C of a two-model (or one-model) system from pooled counters, as the throughput model's endless
    requests see them. A request that ends on the ``entry`` model is replaced there by the next one, as if it
    stayed; one that ends on the other model is replaced on the entry model, as if it moved there with its
    last token kept (without the finish counter such a step would read as a stay)."""
    m = len(stats)
    check_num_models(m)
    if m == 1:
        return [[1.0]], [[1.0]]
    P = [[0.0] * m for _ in range(m)]
    C = [[1.0] * m for _ in range(m)]
    for i, s in enumerate(stats):
        j = 1 - i
        ends = s.finishes if i != entry else 0.0
        moves = s.handoffs + ends
        away = moves / s.request_steps if s.request_steps else 0.0
        P[i][i], P[i][j] = 1.0 - away, away
        if moves:
            C[i][j] = (_kept_on_handoff(s) * s.handoffs + ends) / moves
    return P, C


def _kept_on_handoff(s: StepStats) -> float:
    """The share of hand-off steps whose token was kept: every other step commits one token."""
    if not s.handoffs:
        return 1.0
    return float(np.clip((s.tokens - (s.request_steps - s.handoffs)) / s.handoffs, 0.0, 1.0))


def pool_stats(stats: Sequence[list[StepStats]]) -> list[StepStats]:
    """Per model, the counters of several windows added up."""
    num = len(stats[0])
    return [
        StepStats(
            *(
                sum(getattr(s[m], f) for s in stats)
                for f in ("request_steps", "steps", "step_seconds", "handoffs", "tokens", "finishes")
            )
        )
        for m in range(num)
    ]
