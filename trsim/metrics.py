"""Run metrics: committed-token throughput, TTFT, time per output token, end-to-end latency percentiles,
per-model batch-size histogram and busy fraction, hand-offs per token."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class ModelStats:
    """One model's activity over the run."""

    steps: int
    request_steps: int
    busy_fraction: float
    mean_batch: float
    batch_histogram: dict[int, int]


@dataclass(frozen=True)
class SimResult:
    """What one simulation run measured. Latencies are over the requests that finished (seconds);
    ``None`` when none did (e.g. endless requests)."""

    throughput_tok_s: float
    committed_tokens: int
    simulated_s: float
    wall_s: float
    num_finished: int
    num_unfinished: int
    handoffs_per_token: float
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    models: list[ModelStats] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sim_tokens_per_wall_s(self) -> float:
        """Simulator speed: committed tokens simulated per second of wall time."""
        return self.committed_tokens / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sim_tokens_per_wall_s"] = self.sim_tokens_per_wall_s
        return out


class RunStats:
    """Mutable recorder the driver updates as the run goes (directly: it runs once per step)."""

    def __init__(self, num_models: int, num_procs: int | None = None) -> None:
        self.steps = [0] * num_models
        #: Steps per subserver (one per model, or per replica: ``trcore.replicas.ReplicaTable`` order).
        self.proc_steps = [0] * (num_procs or num_models)
        self.request_steps = [0] * num_models
        self.busy_ticks = [0] * num_models
        self.histograms: list[Counter[int]] = [Counter() for _ in range(num_models)]
        self.handoffs = 0
        self.finished: list[tuple[float, float, float, int]] = []  # arrival, first token, finish, output tokens

    @classmethod
    def pooled(cls, parts: Sequence[RunStats], finished_between: tuple[float, float] | None = None) -> RunStats:
        """One recorder holding every part's counts and finished requests (several runs read as one, as a
        measurement pools its windows); with ``finished_between`` only the requests that finished in that span of
        their run (seconds)."""
        num_models, num_procs = len(parts[0].steps), len(parts[0].proc_steps)
        out = cls(num_models, num_procs)
        for part in parts:
            for name in ("steps", "proc_steps", "request_steps", "busy_ticks"):
                setattr(out, name, [a + b for a, b in zip(getattr(out, name), getattr(part, name), strict=True)])
            for mine, theirs in zip(out.histograms, part.histograms, strict=True):
                mine.update(theirs)
            out.handoffs += part.handoffs
            low, high = finished_between or (-math.inf, math.inf)
            out.finished += [row for row in part.finished if low <= row[2] <= high]
        return out

    def summarize(
        self,
        committed: int,
        measured_tokens: int,
        measured_s: float,
        simulated_s: float,
        wall_s: float,
        num_unfinished: int,
        ticks_per_s: int,
    ) -> SimResult:
        """Freeze into a ``SimResult``; throughput is ``measured_tokens / measured_s`` (after warm-up)."""
        rows = np.array(self.finished, dtype=float).reshape(-1, 4)
        e2e = rows[:, 2] - rows[:, 0]
        ttft = rows[:, 1] - rows[:, 0]
        multi = rows[rows[:, 3] > 1]
        tpot = (multi[:, 2] - multi[:, 1]) / (multi[:, 3] - 1)
        sim_ticks = max(simulated_s * ticks_per_s, 1.0)
        models = [
            ModelStats(
                steps=self.steps[m],
                request_steps=self.request_steps[m],
                busy_fraction=self.busy_ticks[m] / sim_ticks,
                mean_batch=self.request_steps[m] / self.steps[m] if self.steps[m] else 0.0,
                batch_histogram=dict(sorted(self.histograms[m].items())),
            )
            for m in range(len(self.steps))
        ]
        return SimResult(
            throughput_tok_s=measured_tokens / measured_s if measured_s > 0 else 0.0,
            committed_tokens=committed,
            simulated_s=simulated_s,
            wall_s=wall_s,
            num_finished=len(self.finished),
            num_unfinished=num_unfinished,
            handoffs_per_token=self.handoffs / committed if committed else 0.0,
            **_percentiles("latency", e2e),
            **_percentiles("ttft", ttft),
            **_percentiles("tpot", tpot),
            models=models,
        )


def _percentiles(name: str, values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {f"{name}_p{q}_s": None for q in PERCENTILES}
    return {f"{name}_p{q}_s": float(np.percentile(values, q)) for q in PERCENTILES}
