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
    * ``max_batch``: at most this many requests per step;
    * ``peer_slack``: sum over the *other* models of ``(B_j - 1)`` (see :func:`policies_for`).

    With ``n`` requests active the threshold in force is ``min(B, max(1, n - peer_slack))``: a threshold
    vector feasible for the configured concurrency stays feasible (``sum(B_i - 1) < n``) when requests finish
    and fewer remain, so the closed system never deadlocks. At ``n`` equal to a concurrency the vector is
    feasible for, nothing is clamped.
    """

    threshold: int = 1
    table: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    max_wait_s: float | None = None
    max_batch: int = 256
    peer_slack: int = 0

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ConfigError("threshold", f"must be >= 1, got {self.threshold}")
        if self.max_batch < 1:
            raise ConfigError("max_batch", f"must be >= 1, got {self.max_batch}")
        if self.peer_slack < 0:
            raise ConfigError("peer_slack", f"must be >= 0, got {self.peer_slack}")
        if self.max_wait_s is not None and self.max_wait_s < 0:
            raise ConfigError("max_wait_s", f"must be >= 0, got {self.max_wait_s}")
        for active, b in self.table.items():
            if active < 1 or b < 1:
                raise ConfigError("table", f"entry {active}: {b} must have both >= 1")
        object.__setattr__(self, "table", MappingProxyType(dict(sorted(self.table.items()))))

    def __reduce__(self) -> tuple[type[BatchingPolicy], tuple[int, dict[int, int], float | None, int, int]]:
        # MappingProxyType cannot be pickled; rebuild from a plain dict (policies cross process boundaries).
        return (BatchingPolicy, (self.threshold, dict(self.table), self.max_wait_s, self.max_batch, self.peer_slack))

    def threshold_for(self, num_active: int | None) -> int:
        """The threshold in force when ``num_active`` requests are active (None: unknown)."""
        b = self.threshold
        if self.table and num_active is not None:
            b = table_entry(self.table, num_active, b)
        if num_active is not None:
            b = min(b, max(num_active - self.peer_slack, 1))
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


def policies_for(
    thresholds: Sequence[int],
    *,
    max_batch: int | Sequence[int] = 256,
    max_wait_s: float | None = None,
) -> tuple[BatchingPolicy, ...]:
    """One policy per model for a threshold vector, each knowing its peers' slack so the vector stays
    deadlock-free as the number of active requests falls."""
    caps = [max_batch] * len(thresholds) if isinstance(max_batch, int) else list(max_batch)
    if len(caps) != len(thresholds):
        raise ConfigError("max_batch", f"needs one value per model ({len(thresholds)}), got {len(caps)}")
    total = sum(b - 1 for b in thresholds)
    return tuple(
        BatchingPolicy(threshold=b, max_wait_s=max_wait_s, max_batch=cap, peer_slack=total - (b - 1))
        for b, cap in zip(thresholds, caps, strict=True)
    )


def check_tables(
    thresholds: Sequence[int], tables: Sequence[Mapping[int, int]], field: str = "tables", caps: Sequence[int] = ()
) -> None:
    """Threshold tables that can deadlock are a ConfigError: at every active count ``n`` a table keys, the vector in
    force (each model's table entry at ``n``, else its threshold) must leave ``sum(B_i - 1) < n``, or the models
    can all wait for batches the ``n`` requests cannot fill (the optimizer's tables meet this by construction);
    ``caps``: each model's largest batch, which no entry may exceed."""
    if len(tables) != len(thresholds):
        raise ConfigError(field, f"needs one table per model ({len(thresholds)}), got {len(tables)}")
    for i, table in enumerate(tables):
        for active, b in table.items():
            if active < 1 or b < 1:
                raise ConfigError(f"{field}[{i}]", f"entry {active}: {b} must have both >= 1")
            if caps and b > caps[i]:
                raise ConfigError(f"{field}[{i}]", f"entry {active}: {b} is above the model's batch cap {caps[i]}")
    ordered = [dict(sorted(table.items())) for table in tables]
    for n in sorted({k for table in tables for k in table}):
        vector = [table_entry(table, n, b) for table, b in zip(ordered, thresholds, strict=True)]
        if sum(b - 1 for b in vector) >= n:
            raise InfeasibleError(field, f"at {n} active requests the thresholds {vector} can deadlock "
                                  f"(sum of B - 1 = {sum(b - 1 for b in vector)} >= {n})")  # fmt: skip


def table_entry(table: Mapping[int, int], num_active: int, default: int) -> int:
    """The entry of ``table`` (keys ascending) in force at ``num_active`` active requests: the one of the largest
    key not above it, else ``default``."""
    keys = list(table)
    idx = bisect_right(keys, num_active) - 1
    return table[keys[idx]] if idx >= 0 else default
