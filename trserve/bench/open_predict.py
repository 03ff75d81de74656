"""The simulator's figures for an open-loop bench cell: the routed system at the cell's Poisson rate, with the
routing statistics (P, C) and latency tables the closed-loop predictions read (``trserve.bench.runner``), and the
measured figures over them.

The simulated system is the server's: each model's policy is the threshold table the server ran (B* by number of
active requests, 50 ms maximum wait) or B = 1, batches capped at ``server.max_active_requests``, requests of the
bench's lengths arriving as a Poisson process (``trsim.workload``, arrival ``poisson``). It runs
:data:`SIM_OPEN_S` simulated seconds from empty (or the bench's run, when longer), so its figures are the rate's
steady state rather than one draw of a short window; unlike the server it admits every arrival at once (no
admission queue), so above capacity its latencies and backlog grow with that span, not the bench's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trcore.policy import BatchingPolicy
from trserve.bench.client import Workload
from trserve.crossval.stack import StackCosts
from trsim.baselines import apply_baseline
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.latency import TableModel
from trsim.lengths import constant
from trsim.workload import WorkloadConfig

#: Simulated seconds of each prediction (at least the bench's own run).
SIM_OPEN_S = 60.0
#: The routed systems' maximum wait with a threshold table (``trserve.bench.systems``).
MAX_WAIT_S = 0.05
#: The figures compared, measured key -> simulator key (``trsim.metrics.SimResult``).
FIGURES = {"throughput_tok_s": "throughput_tok_s", "ttft_p50_s": "ttft_p50_s", "ttft_p99_s": "ttft_p99_s",
           "tpot_p50_s": "tpot_p50_s", "tpot_p99_s": "tpot_p99_s", "e2e_p50_s": "latency_p50_s",
           "e2e_p99_s": "latency_p99_s"}  # fmt: skip
Matrix = Sequence[Sequence[float]]


def policies(table: Mapping[int, Sequence[int]] | None, num_models: int, max_batch: int) -> tuple[BatchingPolicy, ...]:
    """Each model's policy as the server builds it: the table's column for that model with the maximum wait, or
    B = 1 without one."""
    if not table:
        return tuple(BatchingPolicy(1, max_batch=max_batch) for _ in range(num_models))
    return tuple(BatchingPolicy(1, {int(n): int(b[m]) for n, b in table.items()}, MAX_WAIT_S, max_batch)
                 for m in range(num_models))  # fmt: skip


def sim_at_rate(P: Matrix, C: Matrix, tables: Sequence[Sequence[float]], rate: float, work: Workload,
                table: Mapping[int, Sequence[int]] | None, baseline: str, max_batch: int, seed: int = 0,
                stack: StackCosts | None = None) -> dict[str, Any]:  # fmt: skip
    """The simulator's throughput, latency percentiles (seconds, from arrival) and end backlog at ``rate``."""
    latency = [TableModel(list(range(1, len(t) + 1)), list(t)) for t in tables]
    prompt, output = work.lengths.dists if work.lengths is not None else (constant(16), constant(work.max_tokens))
    arrivals = WorkloadConfig(arrival="poisson", rate_per_s=rate, prompt_tokens=prompt, output_tokens=output)
    config = markov_config(P, C, latency, [1] * len(tables), concurrency=1, workload=arrivals, seed=seed)
    config = replace(config, policies=policies(table, len(tables), max_batch))
    if stack is not None:
        config = replace(config, **stack.sim_fields())
    span = max(SIM_OPEN_S, work.warmup_s + work.window_s)
    result = simulate(apply_baseline(config, baseline), time_s=span)
    out = {key: getattr(result, sim_key) for key, sim_key in FIGURES.items()}
    return {**out, "num_finished": result.num_finished, "backlog_at_end": result.num_unfinished, "simulated_s": span}


def ratios(measured: Mapping[str, Any], predicted: Mapping[str, Any] | None) -> dict[str, float] | None:
    """Measured over simulated for every figure both have (a zero or missing one is left out)."""
    if predicted is None:
        return None
    return {k: measured[k] / predicted[k] for k in FIGURES if measured.get(k) is not None and predicted.get(k)}
