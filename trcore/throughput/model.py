"""The public throughput model: solve one threshold vector, or optimize over the whole feasible set."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from numbers import Integral

from trcore.errors import ConfigError
from trcore.policy import check_feasible
from trcore.throughput.chain import chain_for
from trcore.throughput.rules import AnyFeasible, FixedThresholds
from trcore.throughput.solve import throughput_tok_s
from trcore.throughput.spec import ChainSpec, LatencySpec, build_spec
from trcore.throughput.universe import MAX_STATES, Universe, explore


@dataclass(frozen=True)
class ThroughputResult:
    """Long-run committed tokens per second of one threshold vector, and the number of states of its chain
    (every state reachable from the initial one, transient ones included)."""

    throughput_tok_s: float
    num_states: int
    thresholds: tuple[int, ...]


@dataclass(frozen=True)
class OptimizeResult:
    """The best threshold vector, its throughput, every feasible candidate (in enumeration order: lexicographic
    in the thresholds) and the time the search took (by the clock passed in; 0.0 without one)."""

    thresholds: tuple[int, ...]
    throughput_tok_s: float
    candidates: list[ThroughputResult]
    elapsed_s: float


class ThroughputModel:
    """Markov-chain throughput model of M models under delayed batching (DESIGN.md section 4).

    ``P``, ``C``: M x M routing probabilities (rows sum to 1) and committed tokens per request-step;
    ``latency_s``: per model a constant in seconds or a list indexed by batch size - 1 (larger batches use the
    last entry); ``quantum_s``: the time grid latencies are rounded to; ``max_batch``: per-model batch caps;
    ``max_states``: explored states allowed before giving up. Invalid input raises ``ConfigError`` naming the
    field.
    """

    def __init__(
        self,
        P: Sequence[Sequence[float]],
        C: Sequence[Sequence[float]],
        latency_s: Sequence[LatencySpec],
        quantum_s: float = 1e-4,
        max_batch: Sequence[int] | None = None,
        max_states: int = MAX_STATES,
    ) -> None:
        self.spec: ChainSpec = build_spec(P, C, latency_s, quantum_s, max_batch)
        self.max_states = max_states

    @property
    def num_models(self) -> int:
        return self.spec.num_models

    def solve(self, num_requests: int, thresholds: Sequence[int]) -> ThroughputResult:
        """Throughput of ``num_requests`` closed-loop requests when model i launches at ``thresholds[i]`` waiting.

        Raises ``InfeasibleError`` when the thresholds can deadlock and ``NotIrreducibleError`` when the chain
        has more than one closed class.
        """
        _check_concurrency(num_requests)
        if len(thresholds) != self.num_models:
            raise ConfigError("thresholds", f"needs one per model ({self.num_models}), got {list(thresholds)}")
        if any(isinstance(b, bool) or not isinstance(b, Integral) for b in thresholds):
            raise ConfigError("thresholds", f"must be integers, got {list(thresholds)}")
        check_feasible(thresholds, num_requests)
        num_requests = int(num_requests)
        rule = FixedThresholds(tuple(int(b) for b in thresholds), self.spec.batch_caps(num_requests))
        return solve_in(self.spec, explore(self.spec, num_requests, rule, self.max_states), rule)

    def optimize(
        self,
        num_requests: int,
        clock: Callable[[], float] | None = None,
        workers: int = 1,
        min_gain: float = 0.0,
    ) -> OptimizeResult:
        """Solve every feasible threshold vector and return the best (ties: the first in enumeration order).

        ``min_gain``: a vector that delays batches must beat no delay (all thresholds 1) by more than this
        fraction, else no delay is returned; a predicted gain below the model's own error is not worth the
        waits it would add.

        The states of all candidates are explored once, together; each candidate's chain is then read off that
        shared exploration. Thresholds above a model's max batch act like the max batch, so candidates stop
        there. ``workers`` > 1 solves the candidates in that many processes (same results).
        """
        start = clock() if clock else 0.0
        _check_concurrency(num_requests)
        if workers < 1:
            raise ConfigError("workers", f"must be >= 1, got {workers}")
        if not 0.0 <= min_gain < 1.0:
            raise ConfigError("min_gain", f"must be in [0, 1), got {min_gain}")
        check_feasible([1] * self.num_models, num_requests)
        num_requests = int(num_requests)
        caps = self.spec.batch_caps(num_requests)
        universe = explore(self.spec, num_requests, AnyFeasible(num_requests, caps), self.max_states)
        rules = [FixedThresholds(b, caps) for b in feasible_thresholds(caps, num_requests)]
        candidates = _solve_many(self.spec, universe, rules, workers)
        best = max(candidates, key=lambda c: c.throughput_tok_s)
        no_delay = next(c for c in candidates if max(c.thresholds) == 1)
        if best.throughput_tok_s <= no_delay.throughput_tok_s * (1.0 + min_gain):
            best = no_delay
        elapsed = clock() - start if clock else 0.0
        return OptimizeResult(best.thresholds, best.throughput_tok_s, candidates, elapsed)


def solve_in(spec: ChainSpec, universe: Universe, rule: FixedThresholds) -> ThroughputResult:
    """Read ``rule``'s chain off an exploration that followed its decisions, and solve it."""
    chain = chain_for(universe, rule)
    return ThroughputResult(throughput_tok_s(chain, spec.unit_s), chain.num_states, rule.thresholds)


def feasible_thresholds(caps: Sequence[int], num_requests: int) -> Iterator[tuple[int, ...]]:
    """Every vector with ``1 <= B_i <= caps[i]`` and ``sum(B_i - 1) < num_requests``, in lexicographic order."""
    if not caps:
        yield ()
        return
    for first in range(1, min(caps[0], num_requests) + 1):
        for rest in feasible_thresholds(caps[1:], num_requests - (first - 1)):
            yield (first, *rest)


def _check_concurrency(num_requests: object) -> None:
    if isinstance(num_requests, bool) or not isinstance(num_requests, Integral):
        raise ConfigError("concurrency", f"must be an integer, got {num_requests!r}")


def _solve_many(
    spec: ChainSpec, universe: Universe, rules: list[FixedThresholds], workers: int
) -> list[ThroughputResult]:
    if workers == 1 or len(rules) < 2:
        return _solve_chunk(spec, universe, rules)
    # Interleaved chunks: neighbouring threshold vectors have chains of similar size, so work evens out.
    chunks = [rules[w::workers] for w in range(workers)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(_solve_chunk, [spec] * workers, [universe] * workers, chunks))
    results: list[ThroughputResult] = [parts[0][0]] * len(rules)
    for w, part in enumerate(parts):
        results[w::workers] = part
    return results


def _solve_chunk(spec: ChainSpec, universe: Universe, rules: list[FixedThresholds]) -> list[ThroughputResult]:
    return [solve_in(spec, universe, rule) for rule in rules]
