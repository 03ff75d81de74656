"""KV memory in the throughput model: whether N closed-loop requests fit, each resident on every model it visits
(a parked session keeps its KV while another model writes), and how many fit at most.

A request's footprint over its life is its prompt plus half its output on average (its context grows from the
prompt to prompt + output), so N requests need ``N x (prompt + output / 2)`` tokens of KV on each model they
visit. The thresholds do not change it: every active request is resident somewhere whether it waits or runs.

With lengths that vary, the requests resident at an instant are not a fair sample: a request stays in proportion
to its output, so long ones are over-represented and the mean resident footprint is prompt + E[L^2] / (2 E[L])
(``output_spread`` = E[L^2] / E[L]^2, 1 when every output is equally long). And N requests' KV fluctuates around
N times that mean: with the footprint's standard deviation and ``overflow_z`` standard deviations of margin, N fit
when ``N m + z sqrt(N) s <= capacity`` (z = 1.645: the sum stays within the cache 95% of the time, for
independent requests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trcore.errors import ConfigError, MemoryInfeasibleError


@dataclass(frozen=True)
class KVDemand:
    """Each model's KV capacity in tokens (None: unlimited) and the workload's mean prompt and output lengths."""

    capacity_tokens: tuple[int | None, ...]
    mean_prompt_tokens: float
    mean_output_tokens: float = 0.0
    #: E[L^2] / E[L]^2 of the output lengths L (1: equal lengths); resident requests are length-biased.
    output_spread: float = 1.0
    #: Standard deviation of one resident request's KV (tokens) and the margin in units of it (0: none).
    footprint_std_tokens: float = 0.0
    overflow_z: float = 0.0

    def __post_init__(self) -> None:
        if any(c is not None and not (math.isfinite(c) and c >= 0) for c in self.capacity_tokens):
            raise ConfigError("kv.capacity_tokens", f"must be finite and >= 0, got {list(self.capacity_tokens)}")
        numbers = (self.mean_prompt_tokens, self.mean_output_tokens, self.output_spread, self.footprint_std_tokens,
                   self.overflow_z)  # fmt: skip
        if not all(math.isfinite(x) for x in numbers):
            raise ConfigError("kv.mean_lengths", f"lengths, spread and margin must be finite, got {numbers}")
        if self.mean_prompt_tokens < 0 or self.mean_output_tokens < 0 or self.footprint_tokens <= 0:
            raise ConfigError("kv.mean_lengths", "prompt and output lengths must be >= 0 and not both 0")
        if self.output_spread < 1 or self.footprint_std_tokens < 0 or self.overflow_z < 0:
            raise ConfigError("kv.spread", "output_spread must be >= 1, footprint_std_tokens and overflow_z >= 0")

    @property
    def footprint_tokens(self) -> float:
        """Mean KV one resident request holds on a model it visits: prompt + spread x output / 2."""
        return self.mean_prompt_tokens + self.output_spread * self.mean_output_tokens / 2

    def max_fitting(self, capacity_tokens: int) -> int:
        """The most requests whose KV, with the margin, fits ``capacity_tokens``: the largest N with
        ``N m + z sqrt(N) s <= capacity``."""
        m, margin = self.footprint_tokens, self.overflow_z * self.footprint_std_tokens
        root = (-margin + math.sqrt(margin * margin + 4 * m * capacity_tokens)) / (2 * m)  # sqrt(N) at equality

        def fits(k: int) -> bool:
            return k * m + margin * math.sqrt(k) <= capacity_tokens * (1 + 1e-12)

        n = math.floor(root * root)
        while fits(n + 1):  # the root rounded down (3 requests of 100 tokens exactly fill 300)
            n += 1
        while n > 0 and not fits(n):  # the root rounded up
            n -= 1
        return n


@dataclass(frozen=True)
class MemoryVerdict:
    """What N requests need on each model (0 where none visits), and the most that fit (None: unlimited), set by
    ``bound_model``'s capacity."""

    num_requests: int
    footprint_tokens: float
    need_tokens: tuple[float, ...]
    capacity_tokens: tuple[int | None, ...]
    max_concurrency: int | None
    bound_model: int | None

    @property
    def is_feasible(self) -> bool:
        return self.max_concurrency is None or self.num_requests <= self.max_concurrency

    def describe(self, names: Sequence[str] | None = None) -> str:
        """One line: which model runs out, and how many requests fit."""
        m = self.bound_model
        if m is None:
            return f"{self.num_requests} requests fit (no model has a KV limit)"
        name = names[m] if names else f"model {m}"
        return (
            f"{self.num_requests} requests of {self.footprint_tokens:.0f} KV tokens each (mean resident footprint) "
            f"need {self.need_tokens[m]:.0f} tokens on {name}, which holds {self.capacity_tokens[m]}: "
            f"at most {self.max_concurrency} fit"
        )


def visited_models(P: Sequence[Sequence[float]], entry: int = 0) -> tuple[int, ...]:
    """Models a request can reach from ``entry`` along moves of positive probability."""
    seen, frontier = {entry}, [entry]
    while frontier:
        i = frontier.pop()
        for j, p in enumerate(P[i]):
            if p > 0 and j not in seen:
                seen.add(j)
                frontier.append(j)
    return tuple(sorted(seen))


def memory_check(P: Sequence[Sequence[float]], demand: KVDemand, num_requests: int, entry: int = 0) -> MemoryVerdict:
    """Whether ``num_requests`` requests fit resident on every model they visit."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 0:
        raise ConfigError("num_requests", f"must be an integer >= 0, got {num_requests!r}")
    if not 0 <= entry < len(P):
        raise ConfigError("entry", f"must be within 0..{len(P) - 1}, got {entry}")
    if len(demand.capacity_tokens) != len(P):
        raise ConfigError("kv.capacity_tokens", f"needs one per model ({len(P)}), got {len(demand.capacity_tokens)}")
    visited = visited_models(P, entry)
    foot = demand.footprint_tokens
    need = tuple(num_requests * foot if m in visited else 0.0 for m in range(len(P)))
    limits = {m: demand.max_fitting(c) for m in visited if (c := demand.capacity_tokens[m]) is not None}
    bound = min(limits, key=lambda m: (limits[m], m)) if limits else None
    return MemoryVerdict(
        num_requests, foot, need, demand.capacity_tokens, limits[bound] if bound is not None else None, bound
    )


def check_memory(P: Sequence[Sequence[float]], demand: KVDemand | None, num_requests: int) -> None:
    """Raise :class:`MemoryInfeasibleError` (field ``kv``) when the requests do not fit."""
    if demand is None:
        return
    verdict = memory_check(P, demand, num_requests)
    if not verdict.is_feasible:
        raise MemoryInfeasibleError("kv", verdict.describe())
