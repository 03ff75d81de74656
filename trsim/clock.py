"""Simulated time: integer nanosecond ticks, so coinciding step ends coincide exactly (no float drift)."""

from __future__ import annotations

TICKS_PER_S = 1_000_000_000


def to_ticks(seconds: float) -> int:
    """A positive duration in whole ticks (at least one, so no step or wait takes zero time)."""
    return max(round(seconds * TICKS_PER_S), 1)


def cost_ticks(seconds: float) -> int:
    """A cost in whole ticks: 0 for none, else at least one."""
    return to_ticks(seconds) if seconds > 0 else 0


def to_seconds(ticks: int) -> float:
    return ticks / TICKS_PER_S
