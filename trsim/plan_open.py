"""The planner's open loop (``tokenrouter plan``; docs/planning.md): the highest Poisson rate whose TPOT and TTFT
p99 meet the SLO, by bisection in the simulator with a preset's length distributions, thresholds of 1.

A pipeline batches at most the requests that fit resident on every model they visit (``plan_memory.batch_cap``),
and the server admits at most ``max_active`` requests at once (``server.max_active_requests``, split evenly over
the placement's pipelines; by default, as the server left to its defaults, :data:`SERVER_DEFAULT_PER_PIPELINE` a
pipeline): later arrivals wait for a slot, and their TTFT and end-to-end latency count from their arrival, as the
server's clients see them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from trcore import ConfigError, policies_for
from trsim.build import markov_config
from trsim.driver import Simulation
from trsim.parallel import JobRunner, run_jobs
from trsim.placement import Placement, kv_capacities
from trsim.plan_inputs import plan_models, with_stack
from trsim.plan_memory import batch_cap, mean_lengths
from trsim.roofline import RooflineModel
from trsim.workload import WorkloadConfig, preset

#: A ``trsim.plan.PlanConfig`` (not imported: trsim.plan imports this module).
PlanConfig = Any


def workload_of(cfg: PlanConfig) -> WorkloadConfig:
    """The plan's workload: a preset's name or a config."""
    return preset(cfg.workload) if isinstance(cfg.workload, str) else cfg.workload


#: ``PlanConfig.max_active`` when not given: the server's own default, which is each model's ``max_num_seqs`` (64)
#: times its replicas, i.e. :data:`SERVER_DEFAULT_PER_PIPELINE` requests a pipeline.
SERVER_DEFAULT = "server-default"
SERVER_DEFAULT_PER_PIPELINE = 64


def check_max_active(max_active: int | str | None) -> None:
    """``PlanConfig.max_active`` is a count of at least 1, None (no limit) or :data:`SERVER_DEFAULT`."""
    if max_active not in (None, SERVER_DEFAULT) and not (isinstance(max_active, int) and max_active >= 1):
        raise ConfigError("--max-active-requests", f"must be >= 1 (0 on the command line: no limit), got {max_active}")


def per_pipeline(max_active: int | str | None, replicas: int) -> int | None:
    """A server's admission limit split evenly over ``replicas`` pipelines (at least one request each); the
    server's default (:data:`SERVER_DEFAULT`) admits :data:`SERVER_DEFAULT_PER_PIPELINE` a pipeline."""
    if max_active == SERVER_DEFAULT:
        return SERVER_DEFAULT_PER_PIPELINE
    return None if max_active is None else max(1, int(max_active) // replicas)


#: Raises of the guess by half (1.5**12: about 130x) before the search gives up looking for a rate that fails.
MAX_RAISES = 12


def max_rate(cfg: PlanConfig, placement: Placement, guess_rps: float) -> dict[str, Any]:
    """Highest Poisson rate (requests/s, whole system) meeting the SLO, by bisection on one pipeline, starting
    from ``guess_rps`` (closed-loop throughput over the mean output length), raised by half until a rate fails
    (the closed loop's N can sit far below what the open loop holds). ``upper_failed``: the bracket's top was seen
    to fail (False only when :data:`MAX_RAISES` raises all met the SLO); ``max_rate_rps`` 0 with ``at_max`` None:
    no rate tried met it."""
    models = plan_models(placement, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
    caps = batch_caps(cfg, placement, models)
    one = replace(cfg, max_active=per_pipeline(cfg.max_active, placement.replicas))
    lo, hi, best, upper_failed = 0.0, max(guess_rps / placement.replicas, 1e-3), None, False
    for _ in range(MAX_RAISES + 1):  # bracket: raise the guess by half until a rate fails the SLO
        probe = open_run(one, models, caps, hi)
        if not probe["meets_slo"]:
            upper_failed = True
            break
        lo, best, hi = hi, probe, hi * 1.5
    for _ in range(cfg.bisection_steps):
        probe = open_run(one, models, caps, (lo + hi) / 2)
        lo, hi, best = (probe["rate_rps"], hi, probe) if probe["meets_slo"] else (lo, probe["rate_rps"], best)
        upper_failed = upper_failed or not probe["meets_slo"]
    r = placement.replicas
    return {"max_rate_rps": lo * r, "rate_bracket_rps": [lo * r, hi * r], "upper_failed": upper_failed,
            "at_max": best, "max_batch": list(caps), "max_active_per_pipeline": one.max_active}  # fmt: skip


def batch_caps(cfg: PlanConfig, placement: Placement, models: list[RooflineModel]) -> tuple[int, ...]:
    """Requests a pipeline can hold at once: as many as fit resident on every model they visit, at most 256."""
    cap = batch_cap(cfg, kv_capacities(placement, models), workload_of(cfg))
    return (cap,) * len(models)


def open_run(cfg: PlanConfig, models: list[RooflineModel], caps: tuple[int, ...], rate: float) -> dict[str, Any]:
    """One pipeline at ``rate`` (requests/s) for ``open_run_s`` simulated seconds from empty, judged by the SLO;
    ``cfg.max_active`` is this pipeline's admission limit."""
    workload = replace(workload_of(cfg), arrival="poisson", rate_per_s=rate, num_sessions=None,
                       max_active=cfg.max_active)  # fmt: skip
    config = markov_config(cfg.P, cfg.C, models, [1] * len(models), 1, workload, seed=cfg.seed)
    config = with_stack(replace(config, policies=policies_for([1] * len(models), max_batch=list(caps))), cfg.stack)
    sim = Simulation(config)
    result = sim.run(time_s=cfg.open_run_s)
    tpot, ttft, wait = result.tpot_p99_s, result.ttft_p99_s, result.latency_p90_s
    # Little's law: a stable system holds about rate x latency requests; a growing backlog means overload
    stable = wait is not None and result.num_unfinished <= 1.5 * rate * wait + 8
    stable = stable and keeps_up(rate, (row[2] for row in sim.stats.finished), cfg.open_run_s)
    ok = stable and tpot is not None and ttft is not None
    ok = ok and (cfg.slo_tpot_ms is None or tpot * 1e3 <= cfg.slo_tpot_ms)  # type: ignore[operator]
    ok = ok and (cfg.slo_ttft_ms is None or ttft * 1e3 <= cfg.slo_ttft_ms)  # type: ignore[operator]
    return {"rate_rps": rate, "tpot_p99_ms": _ms(tpot), "ttft_p99_ms": _ms(ttft), "num_finished": result.num_finished,
            "num_unfinished": result.num_unfinished, "meets_slo": bool(ok)}  # fmt: skip


def keeps_up(rate: float, finish_times_s: Iterable[float], run_s: float) -> bool:
    """Whether the run's second half finished about as many requests as arrive in it (``rate x run_s / 2``, less
    three standard deviations of the two halves' Poisson counts and the backlog's slack of 8). An overloaded
    pipeline finishes at its own pace whatever the rate, and its finished requests' latencies grow with the run
    (with an admission limit they wait in the queue), so Little's law on them alone passes any rate when no
    TTFT target catches the wait."""
    return keeps_pace(rate, sum(t >= run_s / 2 for t in finish_times_s), run_s / 2)


def keeps_pace(rate: float, num_finished: int, span_s: float) -> bool:
    """Whether ``num_finished`` requests in ``span_s`` seconds are about the ``rate x span_s`` that arrive in it
    (less three standard deviations of two Poisson counts and the backlog's slack of 8)."""
    expected = rate * span_s
    return num_finished >= expected - 3 * math.sqrt(2 * expected) - 8


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def open_loop_rates(cfg: PlanConfig, ranked: list[dict[str, Any]], runner: JobRunner,
                    stage: Callable[[str, int], Callable[[], None]]) -> None:  # fmt: skip
    """Bisect the Poisson capacity of the ``open_loop_top`` most promising pipelines and give it, times the
    replicas, to every placement built of them. Promise: one pipeline's best closed-loop throughput times the
    replicas that fit on the node (capacity grows with replicas; at a fixed N it does not). A system-wide
    admission limit given as a number is split over the replicas, so there each replica count is bisected."""
    tokens = mean_lengths(workload_of(cfg), cfg.seed)[1]
    singles = [r for r in ranked if r["placement"].replicas == 1]
    fits = {id(r): cfg.num_gpus // r["placement"].gpus_per_pipeline for r in singles}
    singles.sort(key=lambda r: -r["throughput_tok_s"] * fits[id(r)])
    guess = {pipeline_of(r["placement"]): r["throughput_tok_s"] / tokens for r in singles[: cfg.open_loop_top]}
    split = isinstance(cfg.max_active, int)
    todo = [
        r["placement"]
        for r in ranked
        if pipeline_of(r["placement"]) in guess and (split or r["placement"].replicas == 1)
    ]
    args = [(cfg, p, guess[pipeline_of(p)] * p.replicas) for p in todo]
    tick = stage("open loop", len(args))
    rates = run_jobs(runner, max_rate, args, lambda _result: tick())
    found = {(pipeline_of(p), p.replicas): rate for p, rate in zip(todo, rates, strict=True)}
    for row in ranked:
        p = row["placement"]
        one = found.get((pipeline_of(p), p.replicas if split else 1))
        if one is not None:  # bisected with its replicas (a system-wide rate), or one pipeline's rate times r
            r = 1 if split else p.replicas
            row.update(
                one, max_rate_rps=one["max_rate_rps"] * r, rate_bracket_rps=[x * r for x in one["rate_bracket_rps"]]
            )


def pipeline_of(p: Placement) -> tuple[Any, ...]:
    """What makes one pipeline of a placement: its tensor parallelism and co-location (not the replicas)."""
    return (p.tp, p.colocated)
