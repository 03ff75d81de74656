"""The public throughput model: solve one threshold vector, or optimize over the whole feasible set, with the
exact chain or by sampling the same process (``trcore.throughput.sampled``) where the chain grows too large."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from numbers import Integral

from trcore.errors import ConfigError
from trcore.policy import check_feasible
from trcore.throughput.chain import chain_for
from trcore.throughput.memory import KVDemand, MemoryVerdict, check_memory, memory_check
from trcore.throughput.results import OptimizeResult, ThroughputResult
from trcore.throughput.rules import AnyFeasible, FixedThresholds, LaunchRule
from trcore.throughput.sampled import SamplingConfig, optimize_sampled, sample_one
from trcore.throughput.solve import throughput_tok_s
from trcore.throughput.spec import ChainSpec, LatencySpec, build_spec
from trcore.throughput.universe import MAX_STATES, Universe, explore

__all__ = ["METHODS", "OptimizeResult", "ThroughputModel", "ThroughputResult", "feasible_thresholds"]

#: ``exact``: the Markov chain; ``sampled``: Monte Carlo of the same process; ``auto``: exact while it is cheap.
METHODS = ("exact", "sampled", "auto")
#: ``auto`` solves one vector exactly while its chain has at most this many states (about 1.5 s at 50k).
AUTO_SOLVE_MAX_STATES = 50_000
#: ``auto`` optimizes exactly while all candidates' states together stay below this many and the states times
#: the number of candidates below ``AUTO_OPTIMIZE_MAX_WORK`` (a measured proxy of the solve time: 3.7M is
#: about 1 s on this machine); past that, sampling is faster.
AUTO_OPTIMIZE_MAX_STATES = 60_000
AUTO_OPTIMIZE_MAX_WORK = 8_000_000


class ThroughputModel:
    """Markov-chain throughput model of M models under delayed batching (docs/throughput-model.md).

    ``P``, ``C``: M x M routing probabilities (rows sum to 1) and committed tokens per request-step;
    ``latency_s``: per model a constant in seconds or a list indexed by batch size - 1 (larger batches use the
    last entry); ``quantum_s``: the time grid latencies are rounded to; ``max_batch``: per-model batch caps;
    ``max_states``: explored states allowed before giving up; ``sampling``: how the ``sampled`` method runs
    (seed, precision); ``kv``: each model's KV capacity and the workload's mean lengths, so that a concurrency
    whose requests cannot all stay resident raises ``MemoryInfeasibleError`` naming the model
    (``trcore.throughput.memory``). Invalid input raises ``ConfigError`` naming the field.
    """

    def __init__(
        self,
        P: Sequence[Sequence[float]],
        C: Sequence[Sequence[float]],
        latency_s: Sequence[LatencySpec],
        quantum_s: float = 1e-4,
        max_batch: Sequence[int] | None = None,
        max_states: int = MAX_STATES,
        sampling: SamplingConfig | None = None,
        kv: KVDemand | None = None,
    ) -> None:
        self.spec: ChainSpec = build_spec(P, C, latency_s, quantum_s, max_batch)
        self.max_states = max_states
        self.sampling = sampling or SamplingConfig()
        self.kv = kv
        self._P = [list(row) for row in P]
        if kv is not None:
            memory_check(self._P, kv, 1)  # one capacity per model

    def memory(self, num_requests: int) -> MemoryVerdict | None:
        """What ``num_requests`` requests need in KV per model and how many fit (None without ``kv``)."""
        return memory_check(self._P, self.kv, num_requests) if self.kv is not None else None

    @property
    def num_models(self) -> int:
        return self.spec.num_models

    def solve(self, num_requests: int, thresholds: Sequence[int], method: str = "exact") -> ThroughputResult:
        """Throughput of ``num_requests`` closed-loop requests when model i launches at ``thresholds[i]`` waiting.

        ``method``: ``exact`` (the chain), ``sampled`` (an estimate with its standard error) or ``auto`` (exact
        while the chain has at most ``AUTO_SOLVE_MAX_STATES`` states). Raises ``InfeasibleError`` when the
        thresholds can deadlock and, exactly, ``NotIrreducibleError`` when the chain has more than one closed
        class (sampling cannot tell: it reports one run of chance).
        """
        _check_concurrency(num_requests)
        _check_method(method)
        if len(thresholds) != self.num_models:
            raise ConfigError("thresholds", f"needs one per model ({self.num_models}), got {list(thresholds)}")
        if any(isinstance(b, bool) or not isinstance(b, Integral) for b in thresholds):
            raise ConfigError("thresholds", f"must be integers, got {list(thresholds)}")
        check_feasible(thresholds, num_requests)
        check_memory(self._P, self.kv, int(num_requests))
        num_requests = int(num_requests)
        vector = tuple(int(b) for b in thresholds)
        if method == "sampled":
            return sample_one(self.spec, num_requests, vector, self.sampling)
        rule = FixedThresholds(vector, self.spec.batch_caps(num_requests))
        limit = self.max_states if method == "exact" else min(self.max_states, AUTO_SOLVE_MAX_STATES)
        universe = _explore_within(self.spec, num_requests, rule, limit, can_fall_back=method == "auto")
        if universe is None:
            return sample_one(self.spec, num_requests, vector, self.sampling)
        return solve_in(self.spec, universe, rule)

    def optimize(
        self,
        num_requests: int,
        clock: Callable[[], float] | None = None,
        workers: int = 1,
        min_gain: float = 0.0,
        method: str = "exact",
        candidates: Sequence[Sequence[int]] | None = None,
    ) -> OptimizeResult:
        """Solve every feasible threshold vector and return the best (ties: the first in enumeration order).

        ``candidates``: solve only these vectors (and no delay, which is always among them), e.g.
        :func:`threshold_grid`'s; each must be feasible at ``num_requests``, and entries above a model's cap
        act like the cap.

        ``min_gain``: a vector that delays batches must beat no delay (all thresholds 1) by more than this
        fraction, else no delay is returned; a predicted gain below the model's own error is not worth the
        waits it would add.

        ``method="exact"``: the states of all candidates are explored once, together; each candidate's chain is
        then read off that shared exploration. ``workers`` > 1 solves the candidates in that many processes
        (same results). ``method="sampled"``: a race of Monte Carlo estimates (``trcore.throughput.sampled``);
        the best's throughput is a fresh estimate. ``method="auto"``: exact while the shared exploration and
        the solves stay small (``AUTO_OPTIMIZE_MAX_STATES``, ``AUTO_OPTIMIZE_MAX_WORK``), else sampled; the
        result's ``method`` says which ran. Thresholds above a model's max batch act like the max batch, so
        candidates stop there.
        """
        start = clock() if clock else 0.0
        _check_concurrency(num_requests)
        _check_method(method)
        if workers < 1:
            raise ConfigError("workers", f"must be >= 1, got {workers}")
        if workers > 1 and method == "sampled":  # it would run in one process, the workers unused
            raise ConfigError("workers", "solve exact candidates in parallel; method 'sampled' runs in one process")
        if not 0.0 <= min_gain < 1.0:
            raise ConfigError("min_gain", f"must be in [0, 1), got {min_gain}")
        check_feasible([1] * self.num_models, num_requests)
        check_memory(self._P, self.kv, int(num_requests))
        num_requests = int(num_requests)
        caps = self.spec.batch_caps(num_requests)
        vectors = _candidates(caps, num_requests, candidates)
        universe = self._exact_universe(num_requests, caps, len(vectors), method)
        if universe is None:
            best, results = optimize_sampled(self.spec, num_requests, vectors, self.sampling, min_gain)
        else:
            results = _solve_many(self.spec, universe, [FixedThresholds(b, caps) for b in vectors], workers)
            best = _best(results, min_gain)
        used = "sampled" if universe is None else "exact"
        elapsed = clock() - start if clock else 0.0
        return OptimizeResult(best.thresholds, best.throughput_tok_s, results, elapsed, used)

    def _exact_universe(
        self, num_requests: int, caps: tuple[int, ...], num_vectors: int, method: str
    ) -> Universe | None:
        """The exploration shared by every candidate's chain, or None where ``method`` samples instead."""
        if method == "sampled":
            return None
        limit = self.max_states if method == "exact" else min(self.max_states, AUTO_OPTIMIZE_MAX_STATES)
        rule = AnyFeasible(num_requests, caps)
        universe = _explore_within(self.spec, num_requests, rule, limit, can_fall_back=method == "auto")
        if method == "auto" and universe is not None and universe.num_states * num_vectors > AUTO_OPTIMIZE_MAX_WORK:
            return None
        return universe


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


def clamp_to_caps(vector: Sequence[int], caps: Sequence[int]) -> tuple[int, ...]:
    """``vector`` with each threshold above its model's cap lowered to the cap (where it acts the same)."""
    return tuple(min(int(b), c) for b, c in zip(vector, caps, strict=True))


def _candidates(
    caps: tuple[int, ...], num_requests: int, given: Sequence[Sequence[int]] | None
) -> list[tuple[int, ...]]:
    """Every feasible vector, or ``given`` clamped to the caps with no delay added first when missing."""
    if given is None:
        return list(feasible_thresholds(caps, num_requests))
    for v in given:  # zip would drop a short vector's missing entries, int() a fraction's
        if len(v) != len(caps) or any(isinstance(b, bool) or not isinstance(b, Integral) for b in v):
            raise ConfigError("candidates", f"each needs {len(caps)} integer thresholds (one per model), got {list(v)}")
    vectors = [clamp_to_caps(v, caps) for v in given]
    for v in vectors:
        check_feasible(v, num_requests)
    ones = (1,) * len(caps)
    return list(dict.fromkeys([ones, *vectors] if ones not in vectors else vectors))


def _best(candidates: list[ThroughputResult], min_gain: float) -> ThroughputResult:
    """The highest throughput, unless no delay (all thresholds 1) comes within ``min_gain`` of it."""
    best = max(candidates, key=lambda c: c.throughput_tok_s)
    no_delay = next(c for c in candidates if max(c.thresholds) == 1)
    return no_delay if best.throughput_tok_s <= no_delay.throughput_tok_s * (1.0 + min_gain) else best


def _explore_within(
    spec: ChainSpec, num_requests: int, rule: LaunchRule, limit: int, can_fall_back: bool
) -> Universe | None:
    """The states ``rule`` reaches, or None past ``limit`` of them when the caller can sample instead."""
    try:
        return explore(spec, num_requests, rule, limit)
    except ConfigError:
        if can_fall_back:
            return None
        raise


def _check_method(method: object) -> None:
    if method not in METHODS:
        raise ConfigError("method", f"must be one of {', '.join(METHODS)}, got {method!r}")


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
