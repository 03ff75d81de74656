"""Cross-checks of the simulator against the analytic throughput model (``trcore.throughput``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trsim.build import markov_config
from trsim.driver import simulate


def model_throughput(
    P: Sequence[Sequence[float]],
    C: Sequence[Sequence[float]],
    latency_s: Sequence[float],
    concurrency: int,
    thresholds: Sequence[int],
    quantum_s: float = 1e-4,
) -> float:
    """The analytic model's committed-token throughput T(B)."""
    from trcore.throughput import ThroughputModel

    model = ThroughputModel(P, C, latency_s, quantum_s=quantum_s)
    return float(model.solve(concurrency, list(thresholds)).throughput_tok_s)


def model_optimum(
    P: Sequence[Sequence[float]],
    C: Sequence[Sequence[float]],
    latency_s: Sequence[float],
    concurrency: int,
    quantum_s: float = 1e-4,
) -> tuple[int, ...]:
    """The analytic model's best thresholds B* at ``concurrency``."""
    from trcore.throughput import ThroughputModel

    return tuple(ThroughputModel(P, C, latency_s, quantum_s=quantum_s).optimize(concurrency).thresholds)


def compare_point(
    P: Sequence[Sequence[float]],
    C: Sequence[Sequence[float]],
    latency_s: Sequence[float],
    concurrency: int,
    thresholds: Sequence[int],
    tokens: int,
    *,
    seed: int = 0,
    quantum_s: float = 1e-4,
    warmup_tokens: int = 0,
) -> dict[str, Any]:
    """Simulate the model's own assumptions (constant latencies rounded to quanta, Markov routing, endless
    closed-loop requests) and report both throughputs and their relative difference."""
    config = markov_config(P, C, latency_s, thresholds, concurrency, "endless", seed).with_quantum(quantum_s)
    sim = simulate(config, tokens=tokens, warmup_tokens=warmup_tokens)
    model = model_throughput(P, C, latency_s, concurrency, thresholds, quantum_s)
    return {
        "concurrency": concurrency,
        "thresholds": list(thresholds),
        "sim_tok_s": sim.throughput_tok_s,
        "model_tok_s": model,
        "rel_diff": sim.throughput_tok_s / model - 1.0,
        "tokens": sim.committed_tokens,
        "wall_s": sim.wall_s,
    }
