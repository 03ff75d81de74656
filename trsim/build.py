"""Building simulation configs in code: from routing matrices and latencies (the analytic model's inputs), and
from a routing-trace file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from trcore import ConfigError, policies_for
from trcore.traces import RequestTrace, replay_decisions
from trsim.config import SimConfig, checked_thresholds
from trsim.latency import ConstantModel, LatencyModel
from trsim.lengths import LengthPairs
from trsim.routing import RouterConfig
from trsim.tracefile import read_traces
from trsim.workload import WorkloadConfig, preset


def markov_config(
    P: Sequence[Sequence[float]],
    C: Sequence[Sequence[float]] | None,
    latency: Sequence[float | LatencyModel],
    thresholds: Sequence[int] | None = None,
    concurrency: int = 16,
    workload: WorkloadConfig | str = "endless",
    seed: int = 0,
    **options: object,
) -> SimConfig:
    """A system with the stationary Markov router: ``latency[m]`` in seconds (a constant model) or any latency
    model; ``workload`` a preset name or a config (its concurrency replaced by ``concurrency``)."""
    models = [ConstantModel(x) if isinstance(x, int | float) else x for x in latency]
    if len(P) != len(models):  # else P was blamed for the latency list's length
        raise ConfigError("latency", f"needs one entry per model ({len(P)}, the rows of P), got {len(models)}")
    vector = checked_thresholds(thresholds if thresholds is not None else [1] * len(models), len(models))
    base = preset(workload) if isinstance(workload, str) else workload
    params: dict[str, object] = {"P": [list(map(float, row)) for row in P]}
    if C is not None:
        params["C"] = [list(map(float, row)) for row in C]
    return SimConfig(
        latency=tuple(models),
        policies=policies_for(list(vector)),
        router=RouterConfig("markov", params),
        workload=replace(base, concurrency=concurrency),
        seed=seed,
        **options,  # type: ignore[arg-type]
    )


def trace_router(traces: Sequence[RequestTrace]) -> RouterConfig:
    """Trace-replay routing of ``traces`` (see ``trcore.TraceReplayRouter``)."""
    if not traces:
        raise ConfigError("traces", "needs at least one trace")
    return RouterConfig("trace", {"traces": replay_decisions(traces)})


def with_traces(config: SimConfig, traces: Sequence[RequestTrace], default_prompt_tokens: int = 100) -> SimConfig:
    """Route ``config`` by replaying ``traces``; session k follows trace k mod len(traces) and takes its
    prompt and output lengths (``default_prompt_tokens`` where the trace has none)."""
    for k, trace in enumerate(traces):
        if max(max(s.model, s.destination) for s in trace.steps) >= config.num_models:
            raise ConfigError(f"traces[{k}]", f"uses a model index beyond the {config.num_models} models")
    pairs = LengthPairs(tuple((t.num_prompt_tokens or default_prompt_tokens, max(t.output_length, 1)) for t in traces))
    workload = replace(config.workload, pairs=pairs, tag_traces=True)
    return replace(config, router=trace_router(traces), workload=workload)


def load_trace_file(path: str | Path, num_models: int) -> list[RequestTrace]:
    return read_traces(path, num_models)
