"""The predicted side of cross-validation: (a) the analytic throughput model with calibrated latency tables and
P, C estimated from the recorded traces; (b) the simulator with the calibrated latency models and trace replay."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore import BatchingPolicy
from trcore.errors import ConfigError
from trcore.memory import KVBudget
from trcore.routing_stats import RoutingStats, estimate_routing_stats
from trcore.throughput import ThroughputModel
from trcore.traces import RequestTrace
from trserve.config import ServeConfig
from trserve.crossval.plan import Rate
from trserve.crossval.sim_open import Replay
from trserve.crossval.stack import StackCosts
from trserve.engine.emulated import EmulatedLatency
from trsim import breakdown
from trsim.build import with_traces
from trsim.config import SimConfig
from trsim.driver import Simulation
from trsim.kv import KVSimConfig
from trsim.metrics import SimResult
from trsim.profile import latency_from_profile, load_profile
from trsim.windows import simulate_windows
from trsim.workload import WorkloadConfig

#: Time grid of the analytic model (latencies on this machine are tens of milliseconds).
QUANTUM_S = 1e-3


@dataclass(frozen=True)
class Calibration:
    """Per model: its profile path and latency model (``trsim.latency.LatencyModel``); ``stack``: the serving
    stack's own costs the simulator adds (``trserve.crossval.stack``; the throughput model takes none); ``kv``: the
    memory the simulator gives each model."""

    paths: tuple[str, ...]
    latency: tuple[Any, ...]
    stack: StackCosts | None = None
    #: The engines' KV pools and the spill policy (:func:`kv_for_sim`); None: memory is free in the simulator.
    kv: KVSimConfig | None = None

    def table(self, model: int, max_batch: int, context: int, extend: float = 0.0) -> list[float]:
        """Step latency (s) of ``model`` for batch sizes 1..max_batch, every request at ``context`` tokens and
        appending ``extend`` tokens beyond its one decode token (on average)."""
        lat = self.latency[model]
        return [float(lat.predict(b, b * context, round(b * extend))) for b in range(1, max_batch + 1)]


def load_calibration(profile_dir: str | Path, model_names: Sequence[str]) -> Calibration:
    """The profiles ``<profile_dir>/<model>.json`` (as ``tokenrouter calibrate`` writes them)."""

    paths, models = [], []
    for name in model_names:
        path = Path(profile_dir) / f"{name}.json"
        if not path.is_file():
            raise ConfigError("profiles", f"{path} does not exist; run `tokenrouter calibrate` first")
        paths.append(str(path))
        models.append(latency_from_profile(load_profile(path)))
    return Calibration(tuple(paths), tuple(models))


def emulated_calibration(cfg: ServeConfig) -> Calibration:
    """The latencies a ``backend: emulated`` config gives its engines, as the predictors' calibration (so the
    comparison isolates scheduling and transport: the engines step exactly this long)."""
    paths, models = [], []
    for i, m in enumerate(cfg.models):
        if m.emulated is None:
            raise ConfigError(f"models.{i}.emulated", "required with backend: emulated")
        paths.append(f"emulated: {m.emulated.model_dump(exclude_none=True)}")
        models.append(EmulatedLatency.from_config(m.emulated).model)
    return Calibration(tuple(paths), tuple(models))


def kv_for_sim(cfg: ServeConfig, capacity_tokens: dict[int, int]) -> KVSimConfig | None:
    """The simulator's memory for ``cfg``'s models: each engine's pool as its ``Ready`` reported it (tokens), the
    config's block size and ``max_num_seqs``, and ``memory.policy``; None with ``policy: off`` or an engine that
    reported no pool (no accounting on the server either)."""
    policy = cfg.memory.policy
    if policy == "off" or any(capacity_tokens.get(m, 0) <= 0 for m in range(cfg.num_models)):
        return None
    budgets = tuple(
        KVBudget.from_tokens(capacity_tokens[m], model.block_size, model.max_num_seqs)
        for m, model in enumerate(cfg.models)
    )
    return KVSimConfig(budgets, policy)


def memory_note(kv: KVSimConfig | None, capacity_tokens: dict[int, int]) -> dict[str, Any]:
    """What the result records of memory: the engines' pools and what the simulator was given."""
    pools = {str(m): t for m, t in sorted(capacity_tokens.items())}
    if kv is None:
        return {"kv_capacity_tokens": pools, "simulator": "memory free (memory.policy off, or no pool reported)"}
    budgets = [{"num_blocks": b.num_blocks, "block_size": b.block_size, "max_seqs": b.max_seqs} for b in kv.budgets]
    return {"kv_capacity_tokens": pools, "simulator": {"spill": kv.spill, "budgets": budgets}}


def routing_stats(traces: Sequence[RequestTrace], num_models: int, entry_model: int) -> RoutingStats:
    """P, C (and run lengths) of finished requests' traces; a finished request is replaced at the entry model."""
    if not traces:
        raise ConfigError("traces", "no finished request to estimate routing statistics from")
    return estimate_routing_stats(traces, num_models, entry_model=entry_model)


def typical_context(traces: Sequence[RequestTrace], output_lengths: Sequence[int]) -> int:
    """Mean context of a decode step: mean prompt length plus the mean output position of a step, which for
    requests of lengths L is sum(L^2) / (2 sum(L)) (half the output when all are equally long)."""
    prompts = [t.num_prompt_tokens for t in traces if t.num_prompt_tokens is not None]
    mean_prompt = sum(prompts) / len(prompts) if prompts else 0.0
    position = sum(n * n for n in output_lengths) / (2 * sum(output_lengths)) if output_lengths else 0.0
    return max(1, round(mean_prompt + position))


def typical_extend(traces: Sequence[RequestTrace], num_models: int) -> list[float]:
    """Per model, the mean number of tokens a step appends beyond its one decode token: the prompt on a model's
    first visit, and what the other models committed since its last visit (replayed from the traces)."""
    extra = [0] * num_models
    steps = [0] * num_models
    for trace in traces:
        committed = trace.num_prompt_tokens or 0
        anchors = [0] * num_models
        for step in trace.steps:
            extra[step.model] += max(committed - anchors[step.model] - 1, 0)
            steps[step.model] += 1
            anchors[step.model] = committed
            committed += step.kept
    return [e / n if n else 0.0 for e, n in zip(extra, steps, strict=True)]


def model_predictions(
    stats: RoutingStats,
    calibration: Calibration,
    concurrency: int,
    thresholds: Sequence[tuple[int, ...]],
    context: int,
    max_batch: int,
    extend: Sequence[float] = (),
) -> dict[tuple[int, ...], float]:
    """Throughput-model tok/s of each threshold vector at ``concurrency`` (latency tables at ``context`` tokens
    per request, ``extend[m]`` appended tokens per request-step on model m)."""

    cap = min(max_batch, concurrency)
    extend = list(extend) or [0.0] * stats.num_models
    tables = [calibration.table(m, cap, context, extend[m]) for m in range(stats.num_models)]
    model = ThroughputModel(stats.P, stats.C, tables, quantum_s=QUANTUM_S, max_batch=[cap] * stats.num_models)
    return {tuple(b): model.solve(concurrency, b).throughput_tok_s for b in thresholds}


def sim_prediction(
    traces: Sequence[RequestTrace],
    calibration: Calibration,
    load: int | Replay,
    thresholds: tuple[int, ...],
    max_batch: int,
    sim_s: float,
    seed: int = 0,
) -> float:
    """Simulator tok/s of one cell: calibrated latency models and stack costs, requests replaying ``traces`` in
    turn, closed loop (``load``: N sessions, ``sim_s`` simulated seconds) or open loop (a
    :class:`~trserve.crossval.sim_open.Replay`: the scored repeats' arrival times over the cell's own window)."""
    return sim_result(traces, calibration, load, thresholds, max_batch, sim_s, seed).throughput_tok_s


def sim_result(
    traces: Sequence[RequestTrace],
    calibration: Calibration,
    load: int | Replay,
    thresholds: tuple[int, ...],
    max_batch: int,
    sim_s: float,
    seed: int = 0,
) -> SimResult:
    """The simulator's whole result for one cell (see :func:`sim_prediction`); a rate cell's pools its replayed
    windows (``trsim.windows.simulate_windows``: throughput the mean over them, latencies over all)."""
    if isinstance(load, Rate):
        raise TypeError("a rate cell's simulation replays arrival times: pass trserve.crossval.sim_open.Replay")
    policies = tuple(BatchingPolicy(threshold=b, max_batch=max_batch) for b in thresholds)
    stack = calibration.stack
    base = SimConfig(
        latency=tuple(calibration.latency),
        policies=policies,
        workload=sim_workload(load, stack),
        seed=seed,
        kv=calibration.kv,
        send_lag_s=load.send_lag_s if isinstance(load, Replay) else 0.0,
        **(stack.sim_fields() if stack is not None else {}),
    )
    config = with_traces(base, traces)
    if isinstance(load, Replay):
        return simulate_windows(config, load.windows(len(traces)), record_breakdown=True)
    warmup = warmup_tokens(traces, load)
    sim = Simulation(config, record_trace=True)
    result = sim.run(time_s=sim_s, warmup_tokens=warmup)
    assert sim.request_times is not None
    result.extra["breakdown"] = breakdown.of_requests(sim.route_events(), sim.request_times, len(thresholds))
    if result.committed_tokens and result.committed_tokens <= warmup:
        raise ConfigError(
            "sim_s",
            f"{sim_s:g} simulated seconds committed {result.committed_tokens} tokens, not past the warm-up of "
            f"{warmup} (half the first {load} requests' outputs); raise --sim-s",
        )
    return result


def sim_workload(load: int | Replay, stack: StackCosts | None) -> WorkloadConfig:
    """The simulator's arrivals: N closed-loop sessions, each next request the client's turnaround after the
    previous one ended; for a rate cell open-loop arrivals at the rate, which the replayed windows' times
    replace, admitted up to the server's limit."""
    if isinstance(load, Replay):
        return WorkloadConfig(arrival="poisson", rate_per_s=load.rate.rps, max_active=load.max_active)
    turnaround = stack.client_turnaround_s if stack is not None else 0.0
    return WorkloadConfig(arrival="closed", concurrency=load, think_time_s=turnaround)


def warmup_tokens(traces: Sequence[RequestTrace], concurrency: int) -> int:
    """Tokens a closed-loop simulation commits before its throughput counts: half the first N requests'
    outputs (a rate cell's warm-up is the real cell's, in seconds)."""
    lengths = [t.output_length for t in traces]
    return max(1, sum(lengths[:concurrency]) // 2)
