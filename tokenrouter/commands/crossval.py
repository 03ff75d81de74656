"""`tokenrouter crossval`: measure the real server over a grid of cells, predict the same cells with the throughput
model and the simulator, and write JSON, a markdown table and a figure (calibration/crossval/<hardware-tag>/)."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from tokenrouter.errors import cli_errors

ROUTER_NAMES = ("markov", "r2r", "rstitch")
#: Options the closed-loop cells alone read (a rate cell replays its arrivals over its own window, at 1,1 for all).
CLOSED_LOOP_ONLY = {"sim_s": "--sim-s", "full_grid_max_n": "--full-grid-max-n"}


@cli_errors
def crossval(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the local pair."),
    concurrency: str | None = typer.Option(
        None, "--concurrency", "-n", help="Closed-loop concurrencies N [1,2,4,8 unless --rate]."
    ),
    rate: str | None = typer.Option(
        None, "--rate", help="Open loop instead: Poisson arrival rates (requests/s), e.g. 5,10,20; cells per rate."
    ),
    arrival_seed: int | None = typer.Option(
        None, "--arrival-seed", help="Seed of --rate's arrivals; repeat k draws seed + k [0]."
    ),
    thresholds: str = typer.Option(
        "all",
        "--thresholds",
        help="'all' (every feasible vector; a grid above --full-grid-max-n; with --rate: 1,1) or '1,1;2,1'.",
    ),
    full_grid_max_n: int = typer.Option(4, "--full-grid-max-n", help="Largest N run with every feasible vector."),
    routers: str = typer.Option("markov,rstitch", "--routers", help=f"Routers, from {', '.join(ROUTER_NAMES)}."),
    markov_p: str = typer.Option("[[0.75,0.25],[1,0]]", "--markov-p", help="P of the markov router (JSON)."),
    markov_c: str = typer.Option("[[1,0],[1,0]]", "--markov-c", help="C of the markov router (JSON)."),
    tau: float = typer.Option(6.0, "--tau", help="rstitch: small-model entropy that hands over."),
    tau_back: float = typer.Option(5.0, "--tau-back", help="rstitch: large-model entropy below which it hands back."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Output tokens per request (no stop tokens; without --lengths) [96]."
    ),
    warmup_s: float = typer.Option(3.0, "--warmup-s", help="Seconds per cell before the measured window."),
    measure_s: float = typer.Option(12.0, "--measure-s", help="Measured seconds per cell."),
    repeats: int = typer.Option(
        2, "--repeats", help="Runs per cell (interleaved); from 2 on, the first is the input, the rest scored."
    ),
    workload: str | None = typer.Option(
        None, "--workload", help="Workloads, from fixed, reasoning (comma-separated) [fixed]."
    ),
    lengths: str | None = typer.Option(
        None, "--lengths", help="Instead of --workload: lengths from a simulator preset, as `bench --lengths`."
    ),
    length_scale: float | None = typer.Option(None, "--length-scale", help="Every length of --lengths times this [1]."),
    drift: str = typer.Option("scale", "--drift", help="Drift probe: scale, stop, report or skip."),
    drift_tolerance: float = typer.Option(0.05, "--drift-tolerance", help="Relative drift beyond which stop stops."),
    drift_probe: str = typer.Option(
        "auto", "--drift-probe", help="Time engines alone or serving (both stepping); auto: serving on a shared CPU."
    ),
    sim_s: float = typer.Option(120.0, "--sim-s", help="Simulated seconds per closed-loop cell."),
    profiles: Path | None = typer.Option(
        None, "--profiles", help="Profile folder [calibration/profiles/<hardware-tag>]."
    ),
    out: Path | None = typer.Option(None, "--out", help="Output folder [calibration/crossval/<hardware-tag>]."),
    seed: int = typer.Option(0, "--seed", help="Seed of the markov router."),
    stack_probe: bool = typer.Option(
        True, "--stack-probe/--no-stack-probe", help="Measure the stack's own costs for the simulator first."
    ),
    stack: Path | None = typer.Option(None, "--stack", help="Read the stack costs from a stack.json (no probe)."),
) -> None:
    """Cross-validate the throughput model and the simulator against the real server."""
    from tokenrouter import options as opt
    from tokenrouter.commands.serve import _load
    from trcore.errors import ConfigError
    from trserve.bench.requests import Lengths
    from trserve.crossval.drift import PROBE_PLACEMENTS
    from trserve.crossval.plan import RouterChoice, make_plan
    from trserve.crossval.predict import emulated_calibration, load_calibration
    from trserve.crossval.run import run_crossval, write_outputs
    from trserve.crossval.stack import StackProbe, load_stack
    from trserve.crossval.workloads import WORKLOADS, lengths_workload, make_workload
    from trserve.hardware import hardware_tag
    from trserve.paths import calibration_dir
    from trserve.server.drift import DRIFT_MODES

    if length_scale is not None and lengths is None:  # before anything loads: it would scale nothing
        raise ConfigError("--length-scale", "scales --lengths; give --lengths too")
    cfg = _load(config, None, None)
    choices = [
        _router(name.strip(), opt, markov_p, markov_c, (tau, tau_back), seed)
        for name in routers.split(",")
        if name.strip()
    ]
    if not choices:
        raise ConfigError("--routers", f"needs at least one router, got {routers!r}")
    _check_router_options(ctx, [c[0] for c in choices], cfg.num_models)
    if max_tokens is not None and lengths is not None:
        raise ConfigError("--max-tokens", "--lengths draws each request's output length; give one of them")
    max_tokens = 96 if max_tokens is None else max_tokens
    for key, value in {"--max-tokens": max_tokens, "--repeats": repeats, "--full-grid-max-n": full_grid_max_n}.items():
        if value < 1:
            raise ConfigError(key, f"must be >= 1, got {value}")
    for key, fvalue in {"--measure-s": measure_s, "--sim-s": sim_s, "--drift-tolerance": drift_tolerance}.items():
        opt.check_positive(fvalue, key)
    opt.check_seconds(warmup_s, "--warmup-s")
    concurrencies, rates = _loads(concurrency, rate, arrival_seed, measure_s, opt)
    for name, flag in CLOSED_LOOP_ONLY.items():
        if rates and opt.given(ctx, name):
            raise ConfigError(flag, "sizes the closed-loop cells, which --rate replaces; drop one of them")
    if lengths is not None and workload is not None:
        raise ConfigError("--lengths", "give --lengths or --workload, not both")
    preset = Lengths(lengths, 1.0 if length_scale is None else length_scale) if lengths is not None else None
    workloads = ["lengths"]
    if preset is None:
        workloads = [w.strip() for w in ("fixed" if workload is None else workload).split(",") if w.strip()]
        for name in workloads or [""]:
            if name not in WORKLOADS:
                raise ConfigError("--workload", f"unknown workload {name!r}; valid: {', '.join(WORKLOADS)}")
        if len(set(workloads)) != len(workloads):  # it would run twice into the same folder
            raise ConfigError("--workload", f"a workload is given twice: {workload!r}")
    if drift == "skip" and opt.given(ctx, "drift_probe"):
        raise ConfigError("--drift-probe", "places the drift probe, which --drift skip does not run; drop one")
    if drift not in DRIFT_MODES:
        raise ConfigError("--drift", f"unknown mode {drift!r}; valid: {', '.join(DRIFT_MODES)}")
    if drift_probe not in PROBE_PLACEMENTS:
        raise ConfigError("--drift-probe", f"unknown placement {drift_probe!r}; valid: {', '.join(PROBE_PLACEMENTS)}")
    plan = make_plan(
        cfg.num_models,
        concurrencies,
        [RouterChoice(*c) for c in choices],
        opt.parse_threshold_grid(thresholds, cfg.num_models),
        full_grid_max_n,
        rates,
        arrival_seed or 0,
        max_tokens=max_tokens,
        warmup_s=warmup_s,
        measure_s=measure_s,
        repeats=repeats,
    )
    costs = load_stack(stack, cfg.num_models) if stack is not None else None
    command = shlex.join(["tokenrouter", *sys.argv[1:]])
    stack_choice = costs if costs is not None else StackProbe(command) if stack_probe else None
    tag = hardware_tag()
    if cfg.backend == "emulated":  # the engines step exactly as the config says: predict from the same latencies
        calibration = emulated_calibration(cfg)
    else:
        calibration = load_calibration(profiles or calibration_dir("profiles", tag), [m.name for m in cfg.models])
    minutes = len(workloads) * plan.run_seconds / 60
    typer.echo(f"crossval: {plan.num_cells} cells x {len(workloads)} workload(s), about {minutes:.1f} min", err=True)
    base = out or calibration_dir("crossval", tag)
    for name in workloads:
        if preset is not None:
            client = lengths_workload(cfg, preset, warmup_s, measure_s)
        else:
            client = make_workload(name, cfg, max_tokens, warmup_s, measure_s, seed)
        doc, traces = run_crossval(
            cfg, plan, calibration, client, sim_s, _progress, drift, drift_tolerance, stack_choice, drift_probe
        )
        folder = base if len(workloads) == 1 else base / name
        written = write_outputs(doc, traces, folder, f"Cross-validation on {tag}, {client.name} workload")
        _echo_summary(client.name, doc)
        typer.echo("wrote " + ", ".join(str(p) for p in written))


def _loads(
    concurrency: str | None, rate: str | None, arrival_seed: int | None, measure_s: float, opt: Any
) -> tuple[list[int], tuple[float, ...]]:
    """The closed-loop concurrencies and the open-loop rates the options ask for (one kind, not both)."""
    from trcore.errors import ConfigError
    from trserve.bench.open_load import rate_options

    if concurrency is not None and rate is not None:
        raise ConfigError("--rate", "sets the open loop; --concurrency the closed loop: give one of them")
    if rates := rate_options(rate, arrival_seed, measure_s):
        return [], rates
    return opt.parse_ints("1,2,4,8" if concurrency is None else concurrency, "--concurrency"), ()


def _progress(message: str) -> None:
    typer.echo(message, err=True)


def _echo_summary(workload: str, doc: dict[str, Any]) -> None:
    from trserve.crossval.stack import stack_line

    sample = "out of sample" if all(s["out_of_sample"] for s in doc["summary"].values()) else "IN SAMPLE"
    typer.echo(f"{workload} workload ({sample}; drift probe: {doc['drift']['action']}):")
    typer.echo(f"  simulator's stack costs: {stack_line(doc['stack'])}")
    for name, s in doc["summary"].items():
        lat = s["latency"]
        model = "model n/a (open loop)"
        if s["model_median_rel_error"] is not None:
            model = f"model median {s['model_median_rel_error']:.1%} max {s['model_max_rel_error']:.1%} best ok "
            model += str(s["model_best_matches"])
        best = "" if s["sim_best_matches"] is None else f" best ok {s['sim_best_matches']}"
        typer.echo(
            f"  {name}: {model}; sim median {_pct(s['sim_median_rel_error'])} "
            f"max {_pct(s['sim_max_rel_error'])}{best}; sim tpot_p50 median "
            f"{_pct(lat['tpot_p50']['sim_median_rel_error'])}, e2e_p99 max {_pct(lat['e2e_p99']['sim_max_rel_error'])}"
        )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


#: Options that only one router reads: given without it in --routers they would do nothing.
ROUTER_OPTIONS = {"markov_p": ("--markov-p", "markov"), "markov_c": ("--markov-c", "markov"),
                  "tau": ("--tau", "rstitch"), "tau_back": ("--tau-back", "rstitch")}  # fmt: skip


def _check_router_options(ctx: typer.Context, names: list[str], num_models: int) -> None:
    """Each router once; the options of a router not in ``names`` are refused (they would be ignored); the
    markov router's P and C and rstitch's entropies are checked before anything starts."""
    from tokenrouter import options as opt
    from trcore.errors import ConfigError
    from trcore.routers import validate_keep_matrix, validate_matrix

    if len(set(names)) != len(names):  # its cells would run twice under one name
        raise ConfigError("--routers", f"a router is given twice: {','.join(names)}")
    for key, (flag, router) in ROUTER_OPTIONS.items():
        if router not in names and opt.given(ctx, key):
            raise ConfigError(flag, f"sets the {router} router, which --routers ({','.join(names)}) leaves out")
    params = ctx.params
    if "markov" in names:
        validate_matrix("--markov-p", opt.parse_matrix(params["markov_p"], "--markov-p"), num_models, stochastic=True)
        validate_keep_matrix(opt.parse_matrix(params["markov_c"], "--markov-c"), num_models, "--markov-c")
    for key in ("tau", "tau_back"):
        if "rstitch" in names and not math.isfinite(params[key]):
            raise ConfigError(ROUTER_OPTIONS[key][0], f"must be a finite entropy, got {params[key]}")


def _router(
    name: str, opt: Any, markov_p: str, markov_c: str, taus: tuple[float, float], seed: int
) -> tuple[str, str, dict[str, Any]]:
    from trcore.errors import ConfigError

    if name == "markov":
        params = {"P": opt.parse_matrix(markov_p, "--markov-p"), "C": opt.parse_matrix(markov_c, "--markov-c")}
        return name, "markov", {**params, "seed": seed}
    if name == "rstitch":
        return name, "rstitch", {"tau": taus[0], "tau_back": taus[1]}
    if name == "r2r":
        return name, "r2r", {}
    raise ConfigError("--routers", f"unknown router {name!r}; valid: {', '.join(ROUTER_NAMES)}")
