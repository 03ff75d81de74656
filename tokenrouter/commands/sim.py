"""`tokenrouter simulate` and `tokenrouter sweep`: the discrete-event simulator from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tokenrouter import options as opt
from tokenrouter.commands.sim_checks import (
    check_sweepable,
    refuse_fixed_concurrency,
    refuse_thresholds_above_concurrency,
    run_limits,
)
from tokenrouter.errors import cli_errors, named_as_options
from tokenrouter.jobs import RAY_ADDRESS_OPTION, job_runner
from tokenrouter.kv_options import (
    KV_BLOCK_SIZE_OPTION,
    KV_BLOCKS_OPTION,
    KV_MAX_SEQS_OPTION,
    KV_TOKENS_OPTION,
    SPILL_OPTION,
    KVFlags,
    apply_kv_flags,
)
from trcore.errors import ConfigError, NotIrreducibleError

if TYPE_CHECKING:
    from trsim.config import SimConfig

P_HELP = "Routing matrix P (rows sum to 1), JSON or 'a,b;c,d'."
C_HELP = "Probability the token of each transition is kept (C), JSON or 'a,b;c,d'."


def _flag_config(P: str, C: str, latency_ms: str, quantum_ms: float | None, workload: str) -> SimConfig:
    """The system the flags describe, as `tokenrouter throughput` reads them: Markov routing; per model a
    constant latency or a list by batch size - 1 (larger batches use the last entry)."""
    from tokenrouter.commands.analytic import parse_latency_spec
    from trcore.routers import validate_keep_matrix, validate_matrix
    from trsim.build import markov_config
    from trsim.latency import LatencyModel

    p = opt.parse_matrix(P, "--P")
    c = opt.parse_matrix(C, "--C")
    num_models = opt.check_same_size([p, c], ["--P", "--C"])
    validate_matrix("--P", p, num_models, stochastic=True)
    validate_keep_matrix(c, num_models, name="--C")  # as `tokenrouter throughput` does
    entries = parse_latency_spec(latency_ms, num_models, quantum_ms or 1e-6, as_models=True)
    latency: list[LatencyModel] = [_latency_model(e) for e in entries]
    return markov_config(p, c, latency, workload=workload, concurrency=opt.DEFAULT_CONCURRENCY)


def _latency_model(entry: Any) -> Any:
    from trsim.latency import ConstantModel, LatencyModel, TableModel

    if isinstance(entry, LatencyModel):
        return entry
    return TableModel(list(range(1, len(entry) + 1)), entry) if isinstance(entry, list) else ConstantModel(entry)


def _scenario_config(path: Path, adaptive: bool = False) -> tuple[SimConfig, Any]:
    from trsim.scenario import load_scenario, scenario_config

    scenario = load_scenario(path)
    return scenario_config(scenario, path.parent, adaptive=adaptive), scenario


def build_config(
    scenario: Path | None,
    P: str | None,
    C: str | None,
    latency_ms: str | None,
    workload: str | None,
    concurrency: int | None,
    thresholds: str | None,
    quantum_ms: float | None,
    seed: int | None,
    pair: str | None = None,
) -> tuple[SimConfig, Any]:
    """Config from a scenario file or from flags (defaults: the pair's); flags given next to a scenario override it.
    ``thresholds="adaptive"``: the controller tunes them online, from the configured vector (the scenario's
    ``adaptive`` knobs, else the defaults)."""
    from dataclasses import replace

    from trsim.adaptive import AdaptiveSimConfig
    from trsim.workload import preset

    adaptive = thresholds == "adaptive"
    thresholds = None if adaptive else thresholds

    if scenario is not None:
        if any(x is not None for x in (P, C, latency_ms, pair)):
            raise ConfigError("--scenario", "give either a scenario file or --pair/--P/--C/--latency-ms, not both")
        config, spec = _scenario_config(scenario, adaptive)
        if not adaptive and "adaptive" in spec.model_fields_set:
            typer.echo(
                f"note: {scenario}'s adaptive: knobs apply to simulate --thresholds adaptive, not to this run",
                err=True,
            )
        if workload is not None:  # the preset's request shape; the scenario's arrivals, sessions and pacing stay
            if config.workload.pairs is not None:  # they would replace the preset's lengths unsaid
                raise ConfigError("--workload", f"{scenario}'s length pairs (lengths_file) set every request's lengths")
            with named_as_options("workload.preset", option="--workload"):
                shape = preset(workload)
            config = replace(config, workload=replace(config.workload, **{k: getattr(shape, k) for k in SHAPE}))
    else:
        P, C, latency_ms = opt.pair_defaults(opt.ANALYTIC_PAIR if pair is None else pair, P, C, latency_ms)
        with named_as_options("workload.preset", option="--workload"):
            config, spec = _flag_config(P, C, latency_ms, quantum_ms, workload or "endless"), None
        if adaptive:
            config = replace(config, adaptive=AdaptiveSimConfig())
    if concurrency is not None:
        opt.check_positive(concurrency, "--concurrency")
        refuse_fixed_concurrency(config)
        config = config.with_concurrency(concurrency)
    if thresholds is not None:
        config = config.with_thresholds(opt.parse_thresholds(thresholds, config.num_models))
    if quantum_ms is not None:
        opt.check_positive(quantum_ms, "--quantum-ms")
        config = config.with_quantum(quantum_ms / 1000)
    if seed is not None:
        config = replace(config, seed=seed)
    return config, spec


#: The workload fields a ``--workload`` preset gives a scenario: the requests' shape, not their arrivals.
SHAPE = ("prompt_tokens", "output_tokens", "turns", "turn_prompt_tokens")


@cli_errors
def simulate(
    P: str = typer.Option(None, "--P", help=P_HELP + " [default: the pair's]"),
    C: str = typer.Option(None, "--C", help=C_HELP + " [default: the pair's]"),
    latency_ms: str = typer.Option(None, "--latency-ms", help="Per-model step latency, ms [default: the pair's]."),
    pair: str = typer.Option(None, "--pair", help=opt.PAIR_HELP + f" [{opt.ANALYTIC_PAIR}]"),
    quantum_ms: float = typer.Option(None, "--quantum-ms", help="Round step latencies to this quantum (as the model)."),
    concurrency: int = typer.Option(None, "--concurrency", "-N", help="Concurrent requests (closed loop) [16]."),
    thresholds: str = typer.Option(
        None, "--thresholds", help="Batching threshold per model, e.g. '4,1' [all 1], or adaptive (tuned online)."
    ),
    tokens: int = typer.Option(None, "--tokens", help="Run until this many committed tokens [100000]."),
    seed: int = typer.Option(None, "--seed", help="Random seed [0]."),
    baseline: str = typer.Option(None, "--baseline", help="tokenrouter, b1, lockstep, per-token or llm-only."),
    scenario: Path = typer.Option(None, "--scenario", help="Scenario YAML file (see trsim/scenario.py)."),
    workload: str = typer.Option(
        None, "--workload", help="Workload preset (endless, short-reasoning, ...); with --scenario: its lengths only."
    ),
    warmup_tokens: int = typer.Option(None, "--warmup-tokens", help="Tokens excluded from the throughput [0]."),
    chrome_trace: Path = typer.Option(None, "--chrome-trace", help="Write every step as Chrome-trace JSON."),
    trace_out: Path = typer.Option(None, "--trace-out", help="Write per-request routing traces (JSONL)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    replicas: str = typer.Option(None, "--replicas", help="Copies of each model, pinned as the server does [all 1]."),
    kv_tokens: str = KV_TOKENS_OPTION,
    kv_blocks: str = KV_BLOCKS_OPTION,
    kv_block_size: int = KV_BLOCK_SIZE_OPTION,
    kv_max_seqs: int = KV_MAX_SEQS_OPTION,
    spill: str = SPILL_OPTION,
) -> None:
    """Simulate the system (SimPy driving the shared scheduler core) and report throughput and latency."""
    from dataclasses import replace

    from tokenrouter.commands.sim_view import print_summary, write_outputs
    from trsim.baselines import apply_baseline, check_baseline
    from trsim.driver import Simulation
    from trsim.sweep import concurrency_set_by_scenario

    config, spec = build_config(scenario, P, C, latency_ms, workload, concurrency, thresholds, quantum_ms, seed, pair)
    if baseline is not None:
        with named_as_options("baseline"):  # before --thresholds is checked against it
            check_baseline(baseline)
    chosen = baseline or (spec.baseline if spec is not None else "tokenrouter")
    if thresholds is not None and chosen != "tokenrouter":  # the baseline would override them unsaid
        adaptive = "adaptive tunes TokenRouter's thresholds; " if thresholds == "adaptive" else ""
        raise ConfigError("--thresholds", f"{adaptive}the {chosen} baseline sets its own thresholds")
    if thresholds is not None and thresholds != "adaptive":
        refuse_thresholds_above_concurrency(config)
    config = apply_kv_flags(config, KVFlags(kv_tokens, kv_blocks, kv_block_size, kv_max_seqs, spill), scenario)
    if baseline is not None:
        config = apply_baseline(config, baseline)
    if replicas is not None:
        config = replace(config, replicas=tuple(opt.parse_thresholds(replicas, config.num_models, "--replicas")))
    limit, time_s, warmup = run_limits(spec, tokens, warmup_tokens)
    sim = Simulation(config, record_trace=trace_out is not None, chrome_trace=chrome_trace is not None)
    with named_as_options(*(["warmup_tokens"] if warmup_tokens is not None else [])):  # else the scenario's
        result = sim.run(limit, time_s, warmup)
    if warmup and result.committed_tokens < warmup:  # phases, a time limit or finite sessions ended it first
        raise ConfigError("--warmup-tokens", f"{warmup} is past the run's end ({result.committed_tokens} tokens)")
    write_outputs(sim, chrome_trace, trace_out)
    summary = {"baseline": chosen, **result.to_dict()}
    summary["thresholds"] = list(sim.thresholds_in_force())  # at the end of the run: as set, and as run
    summary["applied"] = list(sim.thresholds_applied())
    # None where the scenario sets it (an open loop; phases with their own: each phase lists its N)
    summary["concurrency"] = None if concurrency_set_by_scenario(config) else config.workload.concurrency
    summary["adaptive"] = config.adaptive is not None
    for key in ("phases", "switches"):
        if key in result.extra:
            summary[key] = result.extra[key]
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        print_summary(summary, config.names)


@cli_errors
def sweep(
    scenario: list[Path] = typer.Option(None, "--scenario", help="Scenario YAML (repeat for several)."),
    P: str = typer.Option(None, "--P", help=P_HELP + " [default: the pair's]"),
    C: str = typer.Option(None, "--C", help=C_HELP + " [default: the pair's]"),
    latency_ms: str = typer.Option(None, "--latency-ms", help="Per-model step latency, ms [default: the pair's]."),
    pair: str = typer.Option(None, "--pair", help=opt.PAIR_HELP + f" [{opt.ANALYTIC_PAIR}]"),
    quantum_ms: float = typer.Option(None, "--quantum-ms", help="Round step latencies to this quantum (as the model)."),
    workload: str = typer.Option(None, "--workload", help="Workload preset (endless, short-reasoning, ...)."),
    concurrency: str = typer.Option(None, "--concurrency", "-N", help="Concurrencies, e.g. '1,2,4,8' [16]."),
    thresholds: str = typer.Option("all", "--thresholds", help="'all' feasible vectors, or e.g. '1,1;2,1;4,1'."),
    tokens: int = typer.Option(
        None, "--tokens", help="Committed tokens per run [50000; a scenario with phases: to its last phase]."
    ),
    seed: int = typer.Option(None, "--seed", help="Random seed [0]."),
    jobs: int = typer.Option(None, "--jobs", "-j", help="Worker processes [CPU count]."),
    out: Path = typer.Option(Path("out/sweep"), "--out", help="Folder for sweep.json and sweep.png."),
    with_model: bool = typer.Option(True, "--model/--no-model", help="Add the analytic model (flag systems)."),
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Sweep thresholds x concurrency x scenario in parallel (local processes or a Ray cluster); write JSON and
    a plot, print B* per point."""
    from rich.progress import Progress

    from trsim.plot import plot_sweep
    from trsim.sweep import DEFAULT_TOKENS, best_thresholds, grid, run_sweep

    if tokens is not None:
        opt.check_positive(tokens, "--tokens")
    if thresholds == "adaptive":  # it would fail as "expected numbers", after a note to pass it
        raise ConfigError("--thresholds", "a sweep runs fixed vectors ('all' or e.g. '1,1;2,1'); tune them online "
                          "with tokenrouter simulate --thresholds adaptive")  # fmt: skip
    concurrencies = opt.parse_ints("16" if concurrency is None else concurrency, "--concurrency")
    configs = {}
    for path in scenario or [None]:
        config, spec = build_config(path, P, C, latency_ms, workload, None, None, quantum_ms, seed, pair)
        check_sweepable(path, spec, config, concurrency is not None)
        configs[spec.name if spec is not None else "flags"] = config
    num_models = next(iter(configs.values())).num_models
    skipped: list[str] = []
    points = grid(configs, concurrencies, opt.parse_threshold_grid(thresholds, num_models), skipped)
    for line in skipped:  # a vector asked for and not run is said, not dropped unseen
        typer.echo(f"note: --thresholds {line}", err=True)
    with job_runner(jobs, ray_address, "--jobs") as runner, Progress(transient=True) as progress:
        task = progress.add_task(f"{len(points)} runs", total=len(points))
        rows = run_sweep(configs, points, tokens, runner=runner, on_done=lambda _row: progress.advance(task))
    if with_model and scenario is None:
        flags = opt.pair_defaults(opt.ANALYTIC_PAIR if pair is None else pair, P, C, latency_ms)
        _add_model(rows, configs["flags"], *flags, quantum_ms)
    out.mkdir(parents=True, exist_ok=True)
    # Without --tokens a scenario with phases runs to its last phase: no one count applies to every run.
    phased = any(config.phases for config in configs.values())
    per_run = tokens if tokens is not None else None if phased else DEFAULT_TOKENS
    result = {"points": rows, "tokens_per_run": per_run, "runner": runner.describe()}
    (out / "sweep.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_sweep(rows, out / "sweep.png")
    for (name, n), best in sorted(best_thresholds(rows).items(), key=lambda item: (item[0][0], item[0][1] or 0)):
        at = f"N={n}" if n is not None else "the scenario's concurrency"
        typer.echo(f"{name} {at}: best thresholds {','.join(map(str, best))}")
    typer.echo(f"wrote {out / 'sweep.json'} and {out / 'sweep.png'}")


def _add_model(
    rows: list[dict[str, Any]], config: SimConfig, P: str, C: str, latency_ms: str, quantum_ms: float | None
) -> None:
    """Attach the analytic model's T(B) to each row (``None`` where its chain has no unique answer): the simulated
    system's batch caps, and only the swept vectors, exact while cheap, else sampled (``auto``), so a large N
    does not solve every feasible vector's chain exactly."""
    from tokenrouter.commands.analytic import parse_latency_spec
    from trcore.throughput import ThroughputModel
    from trcore.throughput.model import clamp_to_caps

    p = opt.parse_matrix(P, "--P")
    c = opt.parse_matrix(C, "--C")
    quantum_ms = quantum_ms or 0.1
    caps = [policy.max_batch for policy in config.policies]
    latency = parse_latency_spec(latency_ms, len(p), quantum_ms)
    model = ThroughputModel(p, c, latency, quantum_s=quantum_ms / 1000, max_batch=caps)  # sampling: seed 0
    for n in sorted({row["concurrency"] for row in rows}):
        mine = [row for row in rows if row["concurrency"] == n]
        swept = [clamp_to_caps(row["thresholds"], model.spec.batch_caps(n)) for row in mine]
        try:  # one exploration (or one sampling race) covers every swept vector at this concurrency
            found = model.optimize(n, candidates=swept, method="auto").candidates
            known = {cand.thresholds: cand.throughput_tok_s for cand in found}
        except NotIrreducibleError:
            known = {}
        for row, vector in zip(mine, swept, strict=True):
            row["model_tok_s"] = known.get(vector)
