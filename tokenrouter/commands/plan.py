"""`tokenrouter latency` (one roofline step) and `tokenrouter plan` (placements, thresholds, capacity)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import typer

from tokenrouter import options as opt
from tokenrouter.commands.plan_checks import check_device, check_inputs, node_gpus, parse_models
from tokenrouter.errors import cli_errors, named_as_options
from tokenrouter.jobs import RAY_ADDRESS_OPTION, job_runner
from trcore.errors import ConfigError

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object instead of a table.")


@cli_errors
def latency(
    hardware: str = typer.Option(..., "--hardware", help="Device in trsim/data/hardware.yaml, e.g. a100-80g."),
    shape: str = typer.Option(..., "--shape", help="Shape config in models/shapes, e.g. Qwen3-8B."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    batch: int = typer.Option(1, "--batch", help="Requests in the step."),
    context: int = typer.Option(1024, "--context", help="Tokens already in each request's KV cache."),
    extend: int = typer.Option(0, "--extend", help="Tokens fed beyond one per request (prefill, hand-off)."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16 or fp32."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Roofline step latency of one batch, and the bound it is closest to."""
    from trsim.roofline import RooflineModel, max_batch_tokens

    for value, option in ((batch, "--batch"), (tp, "--tp")):
        if value < 1:
            raise ConfigError(option, f"must be >= 1, got {value}")
    if context < 0 or extend < 0:
        raise ConfigError("--context", "context and extend tokens must be >= 0")
    with named_as_options("hardware", "shape", "dtype", "tp"):
        model = RooflineModel(hardware, shape, tp, dtype)
    model.check_tp("--tp")
    cost = model.cost(batch, batch * context, extend)
    out = {
        "hardware": model.device.name, "shape": shape, "tp": tp, "dtype": dtype, "batch": batch,
        "context": context, "extend": extend, "step_ms": cost.step_s * 1e3, "bound": cost.bound,
        "overhead_dominated": cost.is_overhead_dominated,
        "compute_ms": cost.compute_s * 1e3, "memory_ms": cost.memory_s * 1e3, "comm_ms": cost.comm_s * 1e3,
        "overhead_ms": cost.overhead_s * 1e3, "floor_ms": model.physical_bound_s(batch, batch * context, extend) * 1e3,
        "weights_gb_per_gpu": model.weight_bytes() / 1e9, "kv_capacity_tokens_per_gpu": max_batch_tokens(model),
    }  # fmt: skip
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo(
        f"{shape} on {tp}x {model.device.name} ({dtype}), batch {batch}, context {context}, extend {extend}: "
        f"{out['step_ms']:.2f} ms per step, {out['bound']}-bound (compute {out['compute_ms']:.2f} ms, "
        f"memory {out['memory_ms']:.2f} ms, all-reduce {out['comm_ms']:.2f} ms, overhead {out['overhead_ms']:.2f} ms)"
    )
    if out["kv_capacity_tokens_per_gpu"] == 0:  # a step time for a model that cannot be served there
        typer.echo(
            f"note: {out['weights_gb_per_gpu']:.1f} GB of weights per GPU leave no KV cache in 90% of the "
            f"{model.device.name}'s {model.device.memory_bytes / 1e9:.0f} GB: it does not fit; raise --tp"
        )


@cli_errors
def plan(
    ctx: typer.Context,
    hardware: str = typer.Option("a100-80g", "--hardware", help="Device in trsim/data/hardware.yaml."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weights' and compute dtype: bf16, fp16 or fp32."),
    gpus: int = typer.Option(8, "--gpus", help="GPUs available on the node."),
    pair: str = typer.Option(opt.ANALYTIC_PAIR, "--pair", help="Model pair: its shapes and routing statistics."),
    models: str = typer.Option(None, "--models", help="name=shape per model, small to large [the pair's shapes]."),
    P: str = typer.Option(None, "--P", help="Routing matrix P (rows sum to 1) [the pair's]."),
    C: str = typer.Option(None, "--C", help="Committed tokens per request-step and transition (C) [the pair's]."),
    concurrency: str = typer.Option("8,16,32,64", "--concurrency", "-N", help="Closed-loop concurrencies."),
    thresholds: str = typer.Option(None, "--thresholds", help="Threshold candidates, ';'-separated [1,1;2,1;4,1;1,2]."),
    context: int = typer.Option(1024, "--context", help="Context tokens per request for closed-loop steps."),
    min_gain: float = typer.Option(0.03, "--min-gain", help="Thresholds above 1 only when they gain more."),
    workload: str = typer.Option("short-reasoning", "--workload", help="Preset for the open loop."),
    slo_tpot_ms: float = typer.Option(50.0, "--slo-tpot-ms", help="TPOT p99 target (0: none)."),
    slo_ttft_ms: float = typer.Option(2000.0, "--slo-ttft-ms", help="TTFT p99 target (0: none)."),
    max_active: int = typer.Option(
        None, "--max-active-requests", help="The server's admission limit, split over pipelines (0: none) [64 each]."
    ),
    colocation: bool = typer.Option(True, "--colocation/--no-colocation", help="Also search co-located models."),
    open_loop_top: int = typer.Option(
        3, "--open-loop-top", help="Placements whose Poisson capacity is bisected (0: closed loop only)."
    ),
    open_run_s: float = typer.Option(180.0, "--open-run-s", help="Simulated seconds per open-loop rate."),
    memory_confirm_top: int = typer.Option(
        0, "--memory-confirm-top", help="Best placements whose memory bound is simulated with that KV pool."
    ),
    large_alone: bool = typer.Option(
        True, "--large-alone/--no-large-alone", help="Also plan the large model alone; where routing stops paying."
    ),
    workers: int = typer.Option(None, "--workers", "-j", help="Worker processes [CPU count]."),
    profile: list[str] = typer.Option(
        [], "--profile", help="NAME:TP=PROFILE.json: a measured profile replaces the roofline's step latency (repeat)."
    ),
    stack: Path | None = typer.Option(None, "--stack", help="A crossval stack.json: the stack's costs in every run."),
    out: Path = typer.Option(None, "--out", help="Folder for plan.json and plan.png."),
    as_json: bool = JSON_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Search placements (GPUs, tp, replicas, co-location), thresholds and concurrency for throughput, and the
    highest Poisson rate under a TPOT/TTFT p99 target; roofline step latencies (docs/planning.md)."""
    from trsim.plan import SERVER_DEFAULT, PlanConfig

    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is a file; give a folder for plan.json and plan.png")
    if open_loop_top == 0 and (given := [flag for name, flag in OPEN_LOOP_ONLY.items() if opt.given(ctx, name)]):
        raise ConfigError(given[0], "sets the open loop, which --open-loop-top 0 turns off; drop one of them")
    if models is not None and P is not None and C is not None and opt.given(ctx, "pair"):
        raise ConfigError("--pair", "gives the shapes, P and C, which --models, --P and --C all replace; drop one")
    check_device(hardware, dtype)
    models = models or _pair_models(pair)
    P, C, _ = opt.pair_defaults(pair, P, C, "unused")
    cfg = PlanConfig(
        hardware=hardware,
        dtype=dtype,
        num_gpus=node_gpus(gpus),
        models=parse_models(models),
        P=tuple(map(tuple, opt.parse_matrix(P, "--P"))),
        C=tuple(map(tuple, opt.parse_matrix(C, "--C"))),
        concurrencies=tuple(opt.parse_ints(concurrency, "--concurrency")),
        thresholds=tuple(_threshold_candidates(thresholds, models)),
        context_tokens=opt.at_least_one(context, "--context"),
        min_gain=min_gain,
        colocation=colocation,
        workload=workload,
        slo_tpot_ms=_target_ms(slo_tpot_ms, "--slo-tpot-ms"),
        slo_ttft_ms=_target_ms(slo_ttft_ms, "--slo-ttft-ms"),
        max_active={None: SERVER_DEFAULT, 0: None}.get(max_active, max_active),
        open_loop_top=open_loop_top,
        open_run_s=open_run_s,
        memory_confirm_top=memory_confirm_top,
        compare_alone=large_alone,
    )
    cfg = _with_measured(cfg, profile, stack)
    if not 0 <= min_gain < 1:
        raise ConfigError("--min-gain", f"must be in [0, 1), got {min_gain}")
    if memory_confirm_top < 0:
        raise ConfigError("--memory-confirm-top", f"must be >= 0, got {memory_confirm_top}")
    if open_loop_top < 0:
        raise ConfigError("--open-loop-top", f"must be >= 0, got {open_loop_top}")
    from trsim.clock import MAX_SPAN_S

    if not (math.isfinite(open_run_s) and 0 < open_run_s <= MAX_SPAN_S):  # past it: the simulator's time_s error
        raise ConfigError(
            "--open-run-s", f"must be a finite number of seconds > 0, at most {MAX_SPAN_S:g}, got {open_run_s}"
        )
    check_inputs(cfg, "--models" if opt.given(ctx, "models") else "--pair")
    with job_runner(workers, ray_address, "--workers") as runner:
        result = _run_with_progress(cfg, runner, quiet=as_json)
    if out is not None:
        _write(result, out)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        from tokenrouter.commands.plan_view import print_table

        print_table(result)


#: Options only the open loop's bisection reads (``--open-loop-top 0`` runs none).
OPEN_LOOP_ONLY = {"slo_tpot_ms": "--slo-tpot-ms", "slo_ttft_ms": "--slo-ttft-ms", "open_run_s": "--open-run-s",
                  "max_active": "--max-active-requests"}  # fmt: skip


def _with_measured(cfg: Any, profiles: list[str], stack: Path | None) -> Any:
    """``cfg`` with the measured profiles (``NAME:TP=PATH``) and stack costs (a crossval ``stack.json``)."""
    from dataclasses import replace

    from trserve.crossval.stack import load_stack
    from trsim.plan_inputs import check_profiles

    measured = tuple(_measured_profile(text) for text in profiles)
    check_profiles(measured, cfg.models)
    costs = load_stack(stack, len(cfg.models)).sim_fields() if stack is not None else {}
    return replace(cfg, profiles=measured, stack=costs)


def _measured_profile(text: str) -> Any:
    from trsim.plan_inputs import MeasuredProfile
    from trsim.profile import latency_from_profile, load_profile

    name, _, rest = text.partition(":")
    tp, _, path = rest.partition("=")
    if not name or not tp.isdecimal() or not path:
        raise ConfigError("--profile", f"expected NAME:TP=PROFILE.json, got {text!r}")
    if not Path(path).is_file():
        raise ConfigError("--profile", f"{path} is not a file")
    try:
        latency = latency_from_profile(load_profile(path))
    except (ValueError, OSError) as exc:
        raise ConfigError("--profile", f"{path}: not a latency profile ({str(exc).splitlines()[0]})") from None
    return MeasuredProfile(name, int(tp), latency, path)


def _pair_models(name: str) -> str:
    """``--models`` as pair ``name`` gives them: its models' shape configs."""
    from trsim.pairs import load_pair

    spec = load_pair(opt.check_pair(name)).spec
    if any(m.shape is None for m in spec.models):
        raise ConfigError("--pair", f"{name} has models without shape configs (built here); give --models")
    return ",".join(f"{m.name}={m.shape}" for m in spec.models)


def _target_ms(value: float, option: str) -> float | None:
    """A latency target in ms (0: none)."""
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(option, f"must be a finite number of ms >= 0 (0: no target), got {value}")
    return value or None


def _threshold_candidates(text: str | None, models: str) -> list[tuple[int, ...]]:
    from trsim.plan import default_thresholds

    num = len(parse_models(models))
    grid = default_thresholds(num) if text is None else opt.parse_threshold_grid(text, num)
    if not grid:
        raise ConfigError("--thresholds", "give explicit candidates, e.g. '1,1;2,1' ('all' is too many to plan)")
    return grid


def _run_with_progress(cfg: Any, runner: Any, quiet: bool) -> dict[str, Any]:
    from rich.progress import Progress

    from trsim.plan import run_plan

    start = time.perf_counter()
    with Progress(transient=True, disable=quiet) as progress:

        def stage(name: str, total: int) -> Any:
            task = progress.add_task(name, total=total)
            return lambda: progress.advance(task)

        result = run_plan(cfg, progress=stage, runner=runner)
    result["elapsed_s"] = time.perf_counter() - start
    result["runner"] = runner.describe()
    result["workers"] = result["runner"].get("workers", result["runner"].get("cpus"))
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    from trsim.plan_plot import plot_plan

    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_plan(result, out / "plan.png")
