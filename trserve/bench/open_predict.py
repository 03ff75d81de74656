"""The simulator's figures for an open-loop bench cell: the routed system over each measured window's own arrival
times, with the routing statistics (P, C) and latency tables the closed-loop predictions read
(``trserve.bench.runner``), and the measured figures over them.

The simulated system is the server's: each model's policy is the threshold table the server ran (B* by number of
active requests, 50 ms maximum wait) or B = 1, admission capped at ``server.max_active_requests``, requests of the
bench's lengths. Each window is replayed as it was sent (``trsim.windows``: ``--rate``'s seeded draw of that
window, or the ``--arrivals`` trace's times) from empty over its warm-up and window, and pooled as the measured
figures are: throughput the median over the windows of the tokens committed inside the window per second,
latencies over the requests that finished inside a window, the backlog at each window's end. So the comparison
carries no sampling noise of the arrivals (a fresh draw at the nominal rate is off by about
``1 / sqrt(rate x window)``). As the server, it admits at most ``max_active_requests`` at once: later arrivals
wait for a slot (``WorkloadConfig.max_active``), their latencies counted from arrival.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trcore.policy import BatchingPolicy
from trserve.bench.arrivals import Arrivals
from trserve.bench.client import Workload
from trserve.bench.sim_inputs import bench_requests
from trserve.crossval.stack import StackCosts
from trsim.baselines import apply_baseline
from trsim.build import markov_config
from trsim.latency import TableModel
from trsim.windows import Windows, simulate_windows
from trsim.workload import WorkloadConfig

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


def sim_at_arrivals(P: Matrix, C: Matrix, tables: Sequence[Sequence[float]], windows: Sequence[Arrivals],
                    work: Workload, table: Mapping[int, Sequence[int]] | None, baseline: str, max_batch: int,
                    seed: int = 0, stack: StackCosts | None = None) -> dict[str, Any]:  # fmt: skip
    """The simulator's throughput, latency percentiles (seconds, from arrival) and backlog over ``windows`` (each
    window's arrival times, replayed over ``work.warmup_s`` then ``work.window_s``; see the module's docstring)."""
    latency = [TableModel(list(range(1, len(t) + 1)), list(t)) for t in tables]
    prompt, output, _ = bench_requests(work)
    lengths = WorkloadConfig(arrival="poisson", prompt_tokens=prompt, output_tokens=output,  # arrivals: replayed
                             max_active=max_batch)  # fmt: skip
    config = markov_config(P, C, latency, [1] * len(tables), concurrency=1, workload=lengths, seed=seed)
    config = replace(config, policies=policies(table, len(tables), max_batch))
    if stack is not None:
        config = replace(config, **stack.sim_fields())
    spans = Windows(tuple(w.times_s for w in windows), work.warmup_s, work.window_s, in_window=True)
    result = simulate_windows(apply_baseline(config, baseline), spans)
    out = {key: getattr(result, sim_key) for key, sim_key in FIGURES.items()}
    out["throughput_tok_s"] = statistics.median(result.extra["windows_tok_s"])
    return {**out, "windows_tok_s": result.extra["windows_tok_s"], "num_finished": result.num_finished,
            "backlog_at_end": result.extra["backlog_at_end"], "simulated_s": spans.end_s,
            "arrivals": "each window's own"}  # fmt: skip


def ratios(measured: Mapping[str, Any], predicted: Mapping[str, Any] | None) -> dict[str, float] | None:
    """Measured over simulated for every figure both have (a zero or missing one is left out)."""
    if predicted is None:
        return None
    return {k: measured[k] / predicted[k] for k in FIGURES if measured.get(k) is not None and predicted.get(k)}
