"""Deployment planning: search placements, thresholds and concurrency for throughput, and Poisson capacity under
a latency SLO, from roofline step latencies (``tokenrouter plan``; docs/planning.md).

Closed loop: per placement, concurrency and threshold candidate, the throughput model (the exact chain, on a
1 ms grid) up to ``chain_max_n`` requests per pipeline and the simulator (endless requests) beyond; the best few
placements are confirmed in the simulator. Open loop: the highest Poisson rate whose TPOT and TTFT p99 meet
the SLO, by bisection in the simulator with a preset's length distributions. Replicas are decomposed: r
pipelines each carry N/r requests (closed) or 1/r of the arrivals (open)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trcore import ConfigError
from trcore.throughput import ThroughputModel
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.hardware import load_hardware
from trsim.lengths import constant
from trsim.parallel import JobRunner, LocalRunner, run_jobs
from trsim.placement import Placement, kv_capacities, kv_capacity_tokens, placements, replica_shares, system_throughput
from trsim.plan_alone import Search, beside_routed, fits_nowhere, pair_fits_nowhere
from trsim.plan_inputs import MeasuredProfile, plan_models, with_stack
from trsim.plan_memory import confirm_memory_bound, fits_closed_loop, memory_bound
from trsim.plan_open import SERVER_DEFAULT, check_max_active, open_loop_rates, workload_of
from trsim.roofline import RooflineModel
from trsim.workload import ENDLESS, WorkloadConfig

ASSUMPTIONS = (
    "replicas are equal across models (one replica of each per pipeline; mixed pipelines are not searched); "
    "r pipelines each carry N/r closed-loop requests or 1/r of the arrivals, as pinning a request to one "
    "replica of each model and balancing new requests gives; the simulator core runs one pipeline",
    "co-located models each get half of their GPUs' FLOP/s and bandwidth (pessimistic while the peer idles)",
    "closed loop: endless requests holding context_tokens of context each; the chain up to chain_max_n requests "
    "per pipeline, the simulator beyond; thresholds above 1 only when they gain more than min_gain",
    "open loop: the preset's lengths, thresholds of 1 (no delayed batching); a pipeline batches at most the "
    "requests that fit resident on every model they visit (the memory bound below, at most 256; the rest "
    "wait); the server admits at most max_active requests (split over its pipelines; by default 64 a pipeline, "
    "the engines' default max_num_seqs; later arrivals wait for a slot, their latencies counted from arrival); "
    "each rate runs open_run_s simulated seconds from empty; only the open_loop_top most promising pipelines are "
    "bisected",
    "memory: a request holds KV on every model it visits; closed-loop points whose endless requests of "
    "context_tokens do not fit are skipped; memory_bound is the most requests of the preset's lengths that fit "
    "(mean resident footprint prompt + E[L^2] / (2 E[L]), with a margin of 1.645 standard deviations of the "
    "residents' summed KV), with the throughput there at thresholds of 1",
)


#: The closed loop's simulator runs skip at least this many tokens per request (at 1,522 requests the former
#: 5k-token warm-up, 3 a request, left the window inside the first hand-off wave: 396 tok/s against 8,700).
WARMUP_TOKENS_PER_REQUEST = 8


def default_thresholds(num_models: int) -> list[tuple[int, ...]]:
    """The candidates planned unless given: all 1, the small model waiting for 2 or 4, the large one for 2."""
    ones = (1,) * (num_models - 1)
    return [(1, *ones), (2, *ones), (4, *ones), (*ones, 2)]


@dataclass(frozen=True)
class PlanConfig:
    """What to plan: ``models`` maps names to shapes (small to large, ``P``/``C`` order); the rest bounds the
    search and the simulator runs."""

    hardware: str
    num_gpus: int
    models: dict[str, str]
    P: tuple[tuple[float, ...], ...]
    C: tuple[tuple[float, ...], ...]
    dtype: str = "bf16"
    concurrencies: tuple[int, ...] = (8, 16, 32, 64)
    thresholds: tuple[tuple[int, ...], ...] = ((1, 1), (2, 1), (4, 1), (1, 2))
    context_tokens: int = 1024
    colocation: bool = True
    workload: str | WorkloadConfig = "short-reasoning"
    slo_tpot_ms: float | None = 50.0
    slo_ttft_ms: float | None = 2000.0
    open_loop_top: int = 3
    confirm_top: int = 3
    open_run_s: float = 180.0
    bisection_steps: int = 4
    min_gain: float = 0.03
    sim_tokens: int = 20_000
    chain_max_n: int = 24
    quantum_s: float = 1e-3
    seed: int = 0
    #: Best placements whose memory bound is re-run in the simulator with the preset's lengths and that KV pool.
    memory_confirm_top: int = 0
    #: Plan the large model alone on the same GPUs beside the pair, and where routing stops paying
    #: (:mod:`trsim.plan_alone`).
    compare_alone: bool = True
    #: Measured step latencies replacing the roofline's where they match (:mod:`trsim.plan_inputs`).
    profiles: tuple[MeasuredProfile, ...] = ()
    #: The serving stack's costs added to the planner's simulator runs (``plan_inputs.STACK_FIELDS``).
    stack: Mapping[str, Any] = field(default_factory=dict)
    #: The server's admission limit for the whole system (``server.max_active_requests``), split over the
    #: pipelines; None: no limit; by default the server's (:data:`~trsim.plan_open.SERVER_DEFAULT`).
    max_active: int | str | None = SERVER_DEFAULT

    def __post_init__(self) -> None:
        if len(self.P) != len(self.models) or any(len(t) != len(self.models) for t in self.thresholds):
            raise ConfigError("--models", f"{len(self.models)} models but P and thresholds are for {len(self.P)}")
        if self.slo_tpot_ms is None and self.slo_ttft_ms is None:
            raise ConfigError("--slo-tpot-ms", "open loop needs a TPOT or a TTFT target")
        for name, values in (("--concurrency", self.concurrencies), ("--thresholds", self.thresholds)):
            if len(set(values)) != len(values):  # each would be planned, tabled and judged twice
                raise ConfigError(name, f"a value is given twice: {list(values)}")
        check_max_active(self.max_active)


def feasible(cfg: PlanConfig) -> list[Placement]:
    """Placements whose weights fit, leaving KV room for at least one request of ``context_tokens``."""
    load_hardware(cfg.hardware).peak_flops(cfg.dtype)  # a dtype the device has no figure for is bad input
    out = []
    for p in placements(cfg.num_gpus, len(cfg.models), cfg.colocation):
        try:
            models = plan_models(p, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
        except ConfigError:
            continue
        if kv_capacity_tokens(p, models) >= cfg.context_tokens:
            out.append(p)
    return out


def closed_loop(cfg: PlanConfig, placement: Placement) -> dict[str, Any]:
    """Throughput of every concurrency and threshold candidate that fits the placement's KV cache."""
    models = plan_models(placement, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
    capacity, caps = kv_capacity_tokens(placement, models), kv_capacities(placement, models)
    points = []
    for total in cfg.concurrencies:  # split over the replicas as the server pins them (8 over 3: 3, 3, 2)
        shares = replica_shares(total, placement.replicas)
        if min(shares) < 1 or not fits_closed_loop(cfg, caps, max(shares)):
            continue
        for b in cfg.thresholds:
            if sum(x - 1 for x in b) < min(shares):
                one = lambda n, b=b: _pipeline_throughput(cfg, models, n, b)  # noqa: E731
                tok_s, how = system_throughput(one, total, placement.replicas)
                points.append({"concurrency": total, "thresholds": list(b), "evaluator": how,
                               "throughput_tok_s": tok_s})  # fmt: skip
    bound = memory_bound(cfg, placement.replicas, models, caps, workload_of(cfg), _pipeline_throughput)
    return {"placement": placement, "kv_capacity_tokens": capacity, "memory_bound": bound, "points": points}


def chain_quantum(quantum_s: float, tables: list[list[float]]) -> float:
    """The chain's time grid: ``quantum_s``, or 1/128 of the slowest step where that is coarser (CPU steps of ~1 s
    on a 1 ms grid made a chain of 24 requests too large to solve in hours; GPU steps stay below 128 ms)."""
    return max(quantum_s, max(map(max, tables)) / 128)


def _pipeline_throughput(cfg: PlanConfig, models: list[RooflineModel], n: int, b: tuple[int, ...]) -> tuple[float, str]:
    if n <= cfg.chain_max_n:
        ctx = cfg.context_tokens
        tables = [[m.predict(k, k * ctx, 0) for k in range(1, n + 1)] for m in models]
        chain = ThroughputModel(cfg.P, cfg.C, tables, quantum_s=chain_quantum(cfg.quantum_s, tables))
        return chain.solve(n, b).throughput_tok_s, "chain"
    return _simulated_tok_s(cfg, models, n, b), "sim"


def _simulated_tok_s(cfg: PlanConfig, models: list[RooflineModel], n: int, b: Iterable[int]) -> float:
    endless = WorkloadConfig(prompt_tokens=constant(cfg.context_tokens), output_tokens=constant(ENDLESS))
    config = with_stack(markov_config(cfg.P, cfg.C, models, list(b), n, endless, seed=cfg.seed), cfg.stack)
    # past the synchronized start: all prompts prefilled together, then each request's first visit to every other
    # model (its whole context prefilled there) comes in a wave over its next few tokens
    warmup = max(cfg.sim_tokens // 4, WARMUP_TOKENS_PER_REQUEST * n)
    return simulate(config, tokens=cfg.sim_tokens + warmup, warmup_tokens=warmup).throughput_tok_s


def confirm(cfg: PlanConfig, row: dict[str, Any]) -> float:
    """The simulator's throughput of a placement's best closed-loop point (whole system), from another seed and
    twice the tokens of the search's own simulator runs."""
    p: Placement = row["placement"]
    models = plan_models(p, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
    longer = replace(cfg, seed=cfg.seed + 1, sim_tokens=2 * cfg.sim_tokens)
    if row.get("at_memory_bound"):  # the bound's own evaluation: endless requests holding the resident footprint
        longer = replace(longer, context_tokens=round(row["memory_bound"]["footprint_tokens"]))
    return system_throughput(lambda n: (_simulated_tok_s(longer, models, n, row["thresholds"]), "sim"),
                             row["concurrency"], p.replicas)[0]  # fmt: skip


def _map(fn: Callable[..., Any], args: list[tuple[Any, ...]], runner: JobRunner, tick: Callable[[], None]) -> list[Any]:
    return run_jobs(runner, fn, args, lambda _result: tick())


def run_plan(cfg: PlanConfig, workers: int = 1, progress: Callable[[str, int], Callable[[], None]] | None = None,
             runner: JobRunner | None = None) -> dict[str, Any]:  # fmt: skip
    """The whole search, its jobs on ``runner`` (default: ``workers`` local processes); ``progress(stage,
    total)`` returns a callback ticked once per finished job."""
    stage = progress or (lambda _name, _total: lambda: None)
    runner = runner or LocalRunner(workers)
    clock, stage_s = time.perf_counter, {}
    found = feasible(cfg)
    alone_only = None if found else pair_fits_nowhere(cfg, feasible)  # raises unless the large model alone fits
    start = clock()
    rows = _map(closed_loop, [(cfg, p) for p in found], runner, stage("closed loop", len(found)))
    ranked = sorted((_best_point(r, cfg.min_gain) for r in rows if r["points"]), key=lambda r: -r["throughput_tok_s"])
    if not ranked and found:
        raise ConfigError(
            "--concurrency",
            f"no placement runs any of N = {list(cfg.concurrencies)} with thresholds "
            f"{[list(b) for b in cfg.thresholds]}: more requests than the KV cache holds, or thresholds that "
            "deadlock (sum of B - 1 >= N)",
        )
    top = ranked[: cfg.confirm_top]
    sims = _map(confirm, [(cfg, r) for r in top], runner, stage("confirm in simulator", len(top)))
    for row, tok_s in zip(top, sims, strict=True):
        row["sim_throughput_tok_s"] = tok_s
    bounded = [r for r in ranked if r["memory_bound"]][: cfg.memory_confirm_top]
    sims = _map(confirm_memory_bound, [(cfg, r) for r in bounded], runner, stage("memory bound", len(bounded)))
    for row, by_policy in zip(bounded, sims, strict=True):
        row["memory_bound"] = {**row["memory_bound"], "sim_throughput_tok_s": by_policy}
    stage_s["closed_loop"], start = clock() - start, clock()
    if cfg.open_loop_top > 0:
        open_loop_rates(cfg, ranked, runner, stage)
    stage_s["open_loop"], start = clock() - start, clock()
    report = _report(cfg, ranked, sorted(ranked, key=lambda r: -r["throughput_per_gpu_tok_s"]))
    if cfg.compare_alone:
        search = Search(
            feasible, closed_loop, _best_point, open_loop_rates, _pipeline_throughput, _placement_dict, _map
        )
        report.update(beside_routed(cfg, search, ranked, runner, stage))
        stage_s["large_alone"] = clock() - start
        if alone_only and not report["large_alone"]["placements"]:
            raise ConfigError("--concurrency", f"{fits_nowhere(cfg)}, and the large model alone runs none "
                              f"of N = {list(cfg.concurrencies)}: more requests than its KV cache holds")  # fmt: skip
        if alone_only:
            report["routing_pays"]["verdict"] = alone_only
    return {**report, "stage_s": stage_s}


def _best_point(row: dict[str, Any], min_gain: float) -> dict[str, Any]:
    """The placement's best point; thresholds above 1 must beat no delay at the same N by more than
    ``min_gain`` (as ``ThroughputModel.optimize``), else the gain is within the evaluators' error."""
    p: Placement = row["placement"]
    points, bound = row["points"], row["memory_bound"]
    if bound is not None and bound["binds"]:  # what the workload's requests can hold, not what endless ones do
        points = [x for x in points if x["concurrency"] <= bound["concurrency"]] or [_bound_point(bound)]
    best = max(points, key=lambda x: x["throughput_tok_s"])
    no_delay = [x for x in points if x["concurrency"] == best["concurrency"] and max(x["thresholds"]) == 1]
    if no_delay and best["throughput_tok_s"] <= no_delay[0]["throughput_tok_s"] * (1 + min_gain):
        best = no_delay[0]
    return {**best, "placement": p, "throughput_per_gpu_tok_s": best["throughput_tok_s"] / p.num_gpus,
            "kv_capacity_tokens": row["kv_capacity_tokens"], "memory_bound": row["memory_bound"],
            "points": row["points"]}  # fmt: skip


def _bound_point(bound: dict[str, Any]) -> dict[str, Any]:
    """The memory bound as a closed-loop point: its concurrency, thresholds of 1, its throughput."""
    num_models = len(bound["kv_capacity_tokens"])
    return {"concurrency": bound["concurrency"], "thresholds": [1] * num_models, "evaluator": bound["evaluator"],
            "throughput_tok_s": bound["throughput_tok_s"], "at_memory_bound": True}  # fmt: skip


def _report(cfg: PlanConfig, ranked: list[dict[str, Any]], per_gpu: list[dict[str, Any]]) -> dict[str, Any]:
    out = [_placement_dict(cfg, r) for r in ranked]  # none: the pair fits nowhere (the large model alone is planned)
    with_rate = [o for o in out if o.get("max_rate_rps")]  # bisected, and some rate met the targets
    best = {
        "throughput": out[0]["label"] if out else None,
        "throughput_per_gpu": per_gpu[0]["placement"].label if per_gpu else None,
        "max_rate": max(with_rate, key=lambda o: o["max_rate_rps"])["label"] if with_rate else None,
    }
    config = asdict(replace(cfg, profiles=()))
    config["profiles"] = [{"model": p.model, "tp": p.tp, "source": p.source} for p in cfg.profiles]
    config["stack"] = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.stack.items()}
    if not isinstance(cfg.workload, str):
        config["workload"] = "custom"
    return {"config": config, "assumptions": list(ASSUMPTIONS), "placements": out, "best": best}


def _placement_dict(cfg: PlanConfig, row: dict[str, Any]) -> dict[str, Any]:
    p: Placement = row["placement"]
    per_model = {
        name: {"shape": shape, "gpus": p.model_gpus(m), "tp": p.tp[m], "replicas": p.replicas,
               "threshold": row["thresholds"][m]}
        for m, (name, shape) in enumerate(cfg.models.items())
    }  # fmt: skip
    keys = ("concurrency", "thresholds", "evaluator", "throughput_tok_s", "throughput_per_gpu_tok_s",
            "sim_throughput_tok_s", "max_rate_rps", "rate_bracket_rps", "upper_failed", "max_batch",
            "max_active_per_pipeline", "at_max",
            "at_memory_bound", "kv_capacity_tokens", "memory_bound", "points")  # fmt: skip
    return {"label": p.label, "colocated": p.colocated, "replicas": p.replicas, "num_gpus": p.num_gpus,
            "models": per_model, **{k: row.get(k) for k in keys}}  # fmt: skip
