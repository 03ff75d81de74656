"""The large model served alone beside every routed plan, and where routing stops paying for the pair
(``tokenrouter plan``; docs/planning.md, "When not to route").

The large model alone is planned like the pair: every placement of it on the same GPUs (tensor parallelism and
replicas), the same concurrencies, the same evaluator (the chain up to ``chain_max_n`` requests per pipeline,
the simulator beyond) and, for the open loop, the same Poisson bisection under the same latency targets. At each
concurrency the best routed placements are then re-evaluated at other large-model shares (:mod:`trsim.plan_share`)
to find the share at which their throughput falls to the large model's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trcore import ConfigError
from trsim.parallel import JobRunner
from trsim.placement import Placement, system_throughput
from trsim.plan_inputs import last_model_stack, plan_models
from trsim.plan_share import break_even, large_share, with_large_share

#: A ``trsim.plan.PlanConfig`` (not imported: that module imports this one).
PlanConfig = Any

#: Routed placements (best at a concurrency) re-evaluated at other shares; the best of them sets the routed figure.
BREAK_EVEN_TOP = 3
#: Bisection steps on the share (resolution 2**-8 of the searched range).
BREAK_EVEN_STEPS = 8
Stage = Callable[[str, int], Callable[[], None]]
Row = dict[str, Any]
Fn = Callable[..., Any]


@dataclass(frozen=True)
class Search:
    """The routed plan's own steps (:mod:`trsim.plan` passes them in, so this module does not import it):
    feasible placements, one placement's closed loop, its best point, the open-loop bisection, one pipeline's
    throughput, a placement's report and the job map."""

    feasible: Fn
    closed_loop: Fn
    best_point: Fn
    open_loop: Fn
    throughput: Fn
    placement_dict: Fn
    map: Fn


def alone_config(cfg: PlanConfig) -> PlanConfig:
    """The plan of the last (largest) model alone: one model, every token on it, no thresholds to search."""
    name, shape = list(cfg.models.items())[-1]
    return replace(cfg, models={name: shape}, P=((1.0,),), C=((1.0,),), thresholds=((1,),), colocation=False,
                   stack=last_model_stack(cfg.stack))  # fmt: skip


def fits_nowhere(cfg: PlanConfig) -> str:
    """The sentence that says no placement of the pair fits the node."""
    return f"no placement of {list(cfg.models.values())} fits {cfg.num_gpus} {cfg.hardware}"


def pair_fits_nowhere(cfg: PlanConfig, feasible: Fn) -> str:
    """Where no placement of the pair fits the GPUs: the plan's verdict when the large model alone fits and is
    planned (``compare_alone``); else a ConfigError (saying when the large model alone would fit)."""
    nowhere = fits_nowhere(cfg)
    solo = bool(feasible(alone_config(cfg)))
    if not (solo and cfg.compare_alone):
        if feasible(replace(cfg, context_tokens=1)):  # the weights fit; one request of --context's KV does not
            raise ConfigError("--context", f"{nowhere} with KV room for one request of {cfg.context_tokens} tokens")
        raise ConfigError("--gpus", nowhere + ("; the large model alone fits: drop --no-large-alone" if solo else ""))
    return f"{nowhere}: only the large model alone is planned"


def search_alone(cfg: PlanConfig, search: Search, runner: JobRunner, stage: Stage) -> list[Row]:
    """The large model's placements, best throughput first, each with its best point and (for the
    ``open_loop_top`` most promising pipelines) its Poisson capacity under the plan's targets."""
    solo = alone_config(cfg)
    found = search.feasible(solo)
    args = [(solo, p) for p in found]
    rows = search.map(search.closed_loop, args, runner, stage("large alone: closed loop", len(found)))
    best = (search.best_point(r, solo.min_gain) for r in rows if r["points"])
    ranked = sorted(best, key=lambda r: -r["throughput_tok_s"])
    if cfg.open_loop_top > 0 and ranked:
        search.open_loop(solo, ranked, runner, stage)
    return ranked


Candidates = list[tuple[Placement, tuple[int, ...]]]


def routed_at_share(cfg: PlanConfig, n: int, candidates: Candidates, share: float, throughput: Fn) -> float:
    """The best whole-system throughput of ``candidates`` (placement, thresholds) at ``n`` requests when the
    large model's share of the answer is ``share``; ``throughput``: one pipeline's evaluator (the plan's)."""
    at = replace(cfg, P=with_large_share(cfg.P, cfg.C, share))
    best = 0.0
    for p, b in candidates:
        models = plan_models(p, cfg.hardware, cfg.models, cfg.dtype, cfg.profiles)
        try:
            one = lambda k, models=models, b=b: throughput(at, models, k, b)  # noqa: E731
            best = max(best, system_throughput(one, n, p.replicas)[0])
        except RuntimeError:  # near share 0 or 1 the chain can be singular (a model all but unreachable): skip it
            continue
    return best


def break_even_job(cfg: PlanConfig, n: int, candidates: Candidates, alone: float, throughput: Fn) -> float | None:
    """The large-model share at which routing ``n`` requests stops beating ``alone`` tok/s (see
    :func:`trsim.plan_share.break_even`)."""
    return break_even(lambda s: routed_at_share(cfg, n, candidates, s, throughput), alone, steps=BREAK_EVEN_STEPS)


def best_at(ranked: list[Row], n: int, min_gain: float, best_point: Fn) -> list[tuple[float, Row, Row]]:
    """(throughput, row, point) of every placement's best point at concurrency ``n`` (``best_point``, the
    ranking's rule: thresholds above 1 only when they gain more than ``min_gain``), best first."""
    out = []
    for row in ranked:
        points = [x for x in row["points"] if x["concurrency"] == n]
        if points:
            point = best_point({**row, "points": points}, min_gain)
            out.append((point["throughput_tok_s"], row, point))
    return sorted(out, key=lambda t: -t[0])


def compare(cfg: PlanConfig, search: Search, routed: list[Row], alone: list[Row], runner: JobRunner,
            stage: Stage) -> list[Row]:  # fmt: skip
    """Per concurrency: the best routed and the best large-alone throughput, their ratio, and the break-even
    large-model share (None: routing loses even when the large model writes nothing)."""
    cells, jobs = [], []
    for n in cfg.concurrencies:
        r, a = best_at(routed, n, cfg.min_gain, search.best_point), best_at(alone, n, cfg.min_gain, search.best_point)
        if not r or not a:
            continue
        candidates = [(row["placement"], tuple(pt["thresholds"])) for _, row, pt in r[:BREAK_EVEN_TOP]]
        jobs.append((cfg, n, candidates, a[0][0], search.throughput))
        cells.append({"concurrency": n, "routed": _label(cfg, r[0][1]), "routed_tok_s": r[0][0],
                      "alone": alone_label(cfg, a[0][1]["placement"]), "alone_tok_s": a[0][0],
                      "routed_over_alone": r[0][0] / a[0][0], "routing_pays": r[0][0] > a[0][0]})  # fmt: skip
    shares = search.map(break_even_job, jobs, runner, stage("break-even share", len(jobs)))
    for cell, share in zip(cells, shares, strict=True):
        cell["break_even_share"] = share
    return cells


def alone_label(cfg: PlanConfig, p: Placement) -> str:
    """``large alone 2x tp2``: the model's name, replicas and tensor-parallel degree."""
    return f"{list(cfg.models)[-1]} alone {p.replicas}x tp{p.tp[0]}"


def _label(cfg: PlanConfig, row: dict[str, Any]) -> str:
    return str(row["placement"].label)


def beside_routed(cfg: PlanConfig, search: Search, routed: list[Row], runner: JobRunner, stage: Stage) -> Row:
    """What ``run_plan`` adds to its report: ``large_alone`` (its placements as the routed ones are reported),
    ``routing_pays`` (per concurrency, with the break-even share) and ``ranking`` (routed and alone together)."""
    solo = alone_config(cfg)
    alone = search_alone(cfg, search, runner, stage)
    cells = compare(cfg, search, routed, alone, runner, stage)
    placed = [{**search.placement_dict(solo, r), "label": alone_label(cfg, r["placement"])} for r in alone]
    (name, shape), share = next(iter(solo.models.items())), large_share(cfg.P, cfg.C)
    return {
        "large_alone": {"model": name, "shape": shape, "placements": placed},
        "routing_pays": {"pair_large_share": share, "by_concurrency": cells, "verdict": verdict(share, cells)},
        "ranking": ranking(routed, alone, cfg),
    }


def ranking(routed: list[dict[str, Any]], alone: list[dict[str, Any]], cfg: PlanConfig) -> list[dict[str, Any]]:
    """Routed and large-alone placements in one list, best throughput first."""
    rows = [(r, "routed", _label(cfg, r)) for r in routed]
    rows += [(r, "alone", alone_label(cfg, r["placement"])) for r in alone]
    out = [{"label": label, "system": system, "num_gpus": r["placement"].num_gpus, "concurrency": r["concurrency"],
            "throughput_tok_s": r["throughput_tok_s"], "throughput_per_gpu_tok_s": r["throughput_per_gpu_tok_s"],
            "max_rate_rps": r.get("max_rate_rps"), "upper_failed": r.get("upper_failed")}
           for r, system, label in rows]  # fmt: skip
    return sorted(out, key=lambda x: -x["throughput_tok_s"])


def verdict(share: float, cells: list[dict[str, Any]]) -> str:
    """One sentence: where routing pays at the pair's share, and the share at which it stops, per concurrency."""
    if not cells:
        return "no concurrency was planned for both the pair and the large model alone"
    pays = [c["concurrency"] for c in cells if c["routing_pays"]]
    loses = [c["concurrency"] for c in cells if not c["routing_pays"]]
    head = f"at the pair's large-model share {share:.2f} routing pays at N = {pays or 'none'}"
    head += f" and loses at N = {loses}" if loses else ""
    parts = [f"N = {c['concurrency']}: {_share_text(c['break_even_share'])}" for c in cells]
    return f"{head}; routing stops paying above a large-model share of " + "; ".join(parts)


def _share_text(share: float | None) -> str:
    if share is None:
        return "0 (loses even with no large-model tokens)"
    return f"{share:.3f}" if share < 1.0 else "1 (never)"
