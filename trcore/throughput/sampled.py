"""The sampled method: throughputs estimated from Monte Carlo lanes (``trcore.throughput.lanes``), for one
threshold vector or for a race over every feasible vector in which clearly worse candidates drop out early.

Where the exact chain has too many states (on a 0.1 ms time unit: three models past N = 4, two past N = 20),
sampling the same process still costs little: every candidate runs in the same arrays, most candidates are
out after a few hundred epochs, and only those still close to the leader are sampled until their standard
errors are small. The leader is then re-estimated with fresh lanes, so its reported throughput carries no
selection bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trcore.errors import ConfigError
from trcore.throughput.lanes import Lanes
from trcore.throughput.results import ThroughputResult
from trcore.throughput.spec import ChainSpec
from trcore.throughput.states import IntArray
from trcore.throughput.universe import FloatArray

#: A race keeps at least this many lanes while it can (below ~500 lanes an epoch costs mostly overhead) ...
MIN_LANES = 512
#: ... with at most this many per candidate.
MAX_COPIES = 256


@dataclass(frozen=True)
class SamplingConfig:
    """How the sampled method runs.

    * ``seed``: every run with the same seed and inputs gives the same numbers;
    * ``copies``: independent lanes per candidate in a race; ``confirm_copies``: lanes for a single vector
      (a solve, and the race leader's fresh re-estimate);
    * ``rel_std_error``: sampling stops once every candidate still in the race has a standard error below this
      fraction of its throughput;
    * ``z``: a candidate leaves the race when the leader beats it by more than ``z`` standard errors of the
      difference;
    * ``round_epochs``: epochs between two looks at the race; ``max_epochs``: recorded epochs per lane after
      which sampling stops regardless (the standard errors then say how precise the answer is);
    * ``warmup_per_request``, ``min_warmup_epochs``: epochs discarded at the start (the start, every request
      waiting at model 0, is far from the long run), per concurrent request and at least.
    """

    seed: int = 0
    copies: int = 8
    confirm_copies: int = 64
    rel_std_error: float = 0.0015
    z: float = 4.0
    round_epochs: int = 200
    max_epochs: int = 20_000
    warmup_per_request: int = 4
    min_warmup_epochs: int = 200

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", f"must be an integer >= 0, got {self.seed!r}")
        for name in ("copies", "confirm_copies", "round_epochs", "max_epochs"):
            if getattr(self, name) < 2:
                raise ConfigError(name, f"must be >= 2, got {getattr(self, name)}")
        if not 0 < self.rel_std_error < 1:
            raise ConfigError("rel_std_error", f"must be in (0, 1), got {self.rel_std_error}")
        if self.z <= 0:
            raise ConfigError("z", f"must be positive, got {self.z}")
        if self.warmup_per_request < 0 or self.min_warmup_epochs < 0:
            raise ConfigError("warmup_per_request", "warm-up epochs must be >= 0")

    def warmup_epochs(self, num_requests: int) -> int:
        return max(self.min_warmup_epochs, self.warmup_per_request * num_requests)


def sample_one(
    spec: ChainSpec, num_requests: int, thresholds: Sequence[int], config: SamplingConfig, stream: int = 0
) -> ThroughputResult:
    """One feasible vector's throughput from ``confirm_copies`` lanes; ``stream`` picks independent draws."""
    rng = np.random.default_rng([config.seed, stream])
    return race(spec, num_requests, [tuple(thresholds)], config, config.confirm_copies, rng)[0]


def race(
    spec: ChainSpec,
    num_requests: int,
    candidates: Sequence[tuple[int, ...]],
    config: SamplingConfig,
    copies: int,
    rng: np.random.Generator,
) -> list[ThroughputResult]:
    """Sample every feasible candidate, dropping each once the leader is clearly better; per candidate (in the
    given order) its throughput and standard error when it left or when sampling stopped."""
    lanes = Lanes(spec, num_requests, np.repeat(np.asarray(candidates, dtype=np.int64), copies, axis=0), rng)
    lanes.run(config.warmup_epochs(num_requests))
    tally = _Tally(len(candidates), spec.unit_s)
    alive = np.arange(len(candidates))
    for recorded in range(config.round_epochs, config.max_epochs + config.round_epochs, config.round_epochs):
        tokens, time_units = lanes.run(config.round_epochs)
        tally.add(alive, tokens.reshape(-1, copies), time_units.reshape(-1, copies))
        rate, error = tally.rate[alive], tally.std_error[alive]
        lead = int(np.argmax(rate))
        stays = rate[lead] - rate <= config.z * np.hypot(error, error[lead])
        if recorded >= config.max_epochs or np.all(error[stays] <= config.rel_std_error * rate[stays]):
            break
        alive = alive[stays]
        copies = _regroup(lanes, np.flatnonzero(stays), copies, config)
    return [
        ThroughputResult(float(tally.rate[c]), 0, tuple(int(b) for b in b_vec), float(tally.std_error[c]))
        for c, b_vec in enumerate(candidates)
    ]


def _regroup(lanes: Lanes, stays: IntArray, copies: int, config: SamplingConfig) -> int:
    """Keep the lanes of the candidates that stay; returns the lanes per candidate from now on.

    Once few candidates are left, a round costs mostly per-epoch overhead, so each one's lanes are cloned
    up to ``MIN_LANES`` in all (at most ``MAX_COPIES`` each); clones start where their parent is and forget
    it within a few dozen epochs, which are run before the next recorded round.
    """
    grow = min(MAX_COPIES // copies, -(-MIN_LANES // (len(stays) * copies)))
    rows = (stays[:, None] * copies + np.arange(copies)).ravel()
    if grow <= 1:
        lanes.keep(rows)
        return copies
    lanes.keep(np.repeat(rows.reshape(len(stays), copies), grow, axis=0).ravel())
    lanes.run(config.min_warmup_epochs)
    return copies * grow


class _Tally:
    """Per candidate, sums over its batches (one per lane and round) of tokens t, time s, t², ts and s².

    The throughput is the ratio estimator sum(t) / sum(s); its standard error comes from the batch residuals
    t - R s (the delta method), which treats batches as independent: rounds are much longer than the few
    dozen epochs over which the process forgets its state.
    """

    def __init__(self, num_candidates: int, unit_s: float) -> None:
        self._sums = np.zeros((6, num_candidates))
        self._unit_s = unit_s

    def add(self, candidates: IntArray, tokens: FloatArray, time_units: FloatArray) -> None:
        """Add one round: ``tokens`` and ``time_units`` have a row per candidate, a column per lane."""
        for row, values in enumerate(
            (np.ones_like(tokens), tokens, time_units, tokens**2, tokens * time_units, time_units**2)
        ):
            self._sums[row, candidates] += values.sum(axis=1)

    @property
    def rate(self) -> FloatArray:
        t, s = self._sums[1:3]
        return np.asarray(np.divide(t, s * self._unit_s, out=np.zeros_like(t), where=s > 0), dtype=np.float64)

    @property
    def std_error(self) -> FloatArray:
        count, t, s, tt, ts, ss = self._sums
        ratio = np.divide(t, s, out=np.zeros_like(t), where=s > 0)
        residual = np.maximum(tt - 2 * ratio * ts + ratio**2 * ss, 0.0)
        scale = np.divide(count, s * self._unit_s, out=np.zeros_like(s), where=s > 0)
        var = np.divide(residual, count * (count - 1), out=np.full_like(t, np.inf), where=count > 1)
        return np.asarray(np.sqrt(var) * scale, dtype=np.float64)


def optimize_sampled(
    spec: ChainSpec,
    num_requests: int,
    candidates: Sequence[tuple[int, ...]],
    config: SamplingConfig,
    min_gain: float,
) -> tuple[ThroughputResult, list[ThroughputResult]]:
    """Race ``candidates`` (which must include no delay, all thresholds 1), re-estimate the leader with fresh
    lanes and apply ``min_gain`` against no delay (also re-estimated); the best and every candidate's result."""
    first = race(spec, num_requests, candidates, config, config.copies, np.random.default_rng([config.seed, 0]))
    lead = max(range(len(first)), key=lambda c: first[c].throughput_tok_s)
    estimates = list(first)
    best = estimates[lead] = sample_one(spec, num_requests, candidates[lead], config, stream=1)
    if min_gain > 0 and max(best.thresholds) > 1:
        ones = candidates.index((1,) * spec.num_models)
        no_delay = estimates[ones] = sample_one(spec, num_requests, candidates[ones], config, stream=2)
        if best.throughput_tok_s <= no_delay.throughput_tok_s * (1.0 + min_gain):
            best = no_delay
    return best, estimates
