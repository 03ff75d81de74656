"""Delayed-batching policy: when may a model launch a step, and with how many requests."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from trcore.errors import ConfigError, InfeasibleError


@dataclass(frozen=True)
class BatchingPolicy:
    """Launch a step when at least ``threshold`` requests are ready.

    * ``table``: thresholds keyed by the number of active requests in the whole system; the entry with the
      largest key not above the current count applies (``threshold`` below the smallest key);
    * ``max_wait_s``: a non-empty queue launches anyway once its oldest ready request waited this long;
    * ``max_batch``: at most this many requests per step.

    The threshold never exceeds the number of active requests, so a lone request cannot wait forever.
    """

    threshold: int = 1
    table: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    max_wait_s: float | None = None
    max_batch: int = 256

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ConfigError("threshold", f"must be >= 1, got {self.threshold}")
        if self.max_batch < 1:
            raise ConfigError("max_batch", f"must be >= 1, got {self.max_batch}")
        if self.max_wait_s is not None and self.max_wait_s < 0:
            raise ConfigError("max_wait_s", f"must be >= 0, got {self.max_wait_s}")
        for active, b in self.table.items():
            if active < 1 or b < 1:
                raise ConfigError("table", f"entry {active}: {b} must have both >= 1")
        object.__setattr__(self, "table", MappingProxyType(dict(sorted(self.table.items()))))

    def __reduce__(self) -> tuple[type[BatchingPolicy], tuple[int, dict[int, int], float | None, int]]:
        # MappingProxyType cannot be pickled; rebuild from a plain dict (policies cross process boundaries).
        return (BatchingPolicy, (self.threshold, dict(self.table), self.max_wait_s, self.max_batch))

    def threshold_for(self, num_active: int | None) -> int:
        """The threshold in force when ``num_active`` requests are active (None: unknown)."""
        b = self.threshold
        if self.table and num_active is not None:
            keys = list(self.table)
            idx = bisect_right(keys, num_active) - 1
            if idx >= 0:
                b = self.table[keys[idx]]
        if num_active is not None:
            b = min(b, max(num_active, 1))
        return min(b, self.max_batch)

    def should_launch(self, num_ready: int, oldest_ready: float, now: float, num_active: int | None) -> bool:
        """The delayed-batching decision for an idle model."""
        if num_ready == 0:
            return False
        if num_ready >= self.threshold_for(num_active):
            return True
        return self.max_wait_s is not None and now - oldest_ready >= self.max_wait_s

    def deadline(self, oldest_ready: float) -> float | None:
        """When a waiting queue will launch by max wait, if ever."""
        return None if self.max_wait_s is None else oldest_ready + self.max_wait_s


def check_feasible(thresholds: Sequence[int], num_requests: int) -> None:
    """Reject threshold vectors that can deadlock N closed-loop requests (sum of B_i - 1 >= N)."""
    if num_requests < 1:
        raise ConfigError("concurrency", f"must be >= 1, got {num_requests}")
    for i, b in enumerate(thresholds):
        if not 1 <= b <= num_requests:
            raise ConfigError("thresholds", f"B_{i} = {b} must be within 1..{num_requests} (the concurrency)")
    slack = sum(b - 1 for b in thresholds)
    if slack >= num_requests:
        raise InfeasibleError(
            "thresholds",
            f"sum of (B_i - 1) = {slack} must be < concurrency {num_requests}, else requests can deadlock",
        )


def is_feasible(thresholds: Sequence[int], num_requests: int) -> bool:
    return all(1 <= b <= num_requests for b in thresholds) and sum(b - 1 for b in thresholds) < num_requests
