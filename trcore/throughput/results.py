"""What the throughput model returns: one threshold vector's throughput, and an optimizer's answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ThroughputResult:
    """Long-run committed tokens per second of one threshold vector.

    ``num_states``: states of its chain (every state reachable from the initial one, transient ones included);
    0 when the throughput was sampled instead. ``std_error_tok_s``: the standard error of a sampled
    throughput; 0.0 for the exact chain.
    """

    throughput_tok_s: float
    num_states: int
    thresholds: tuple[int, ...]
    std_error_tok_s: float = 0.0

    @property
    def method(self) -> str:
        """``exact`` or ``sampled``: how the throughput was found."""
        return "exact" if self.num_states > 0 else "sampled"


@dataclass(frozen=True)
class OptimizeResult:
    """The best threshold vector, its throughput, every feasible candidate (in enumeration order: lexicographic
    in the thresholds), the time the search took (by the clock passed in; 0.0 without one) and the method that
    solved the candidates (``exact`` or ``sampled``)."""

    thresholds: tuple[int, ...]
    throughput_tok_s: float
    candidates: list[ThroughputResult]
    elapsed_s: float
    method: str = "exact"
