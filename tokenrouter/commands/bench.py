"""`tokenrouter bench`: TokenRouter and its baselines side by side on real engines, one invocation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tokenrouter.errors import cli_errors
from trcore.errors import ConfigError
from trserve.bench.open_load import TABLE_CONCURRENCIES
from trserve.bench.open_load import open_load as load_of
from trserve.bench.systems import BENCH_SYSTEMS, SINGLE_MODEL

#: The closed loop's concurrencies when neither --concurrency nor --rate / --arrivals is given.
CLOSED_DEFAULT = "1,4,8,16"


def _ints(text: str, field: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(field, f"must be positive integers, got {text!r}")
    return values


def _lengths(preset: str | None, scale: float | None, base: dict[str, Any]) -> Any:
    """The ``--lengths`` load, refused when its longest request exceeds a model's context."""
    from trserve.bench.requests import Lengths

    if preset is None:
        return None
    lengths = Lengths(preset, 1.0 if scale is None else scale)
    lengths.check_fits(min(int(m.get("max_model_len", 2048)) for m in base["models"]))
    return lengths


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


@cli_errors
def bench(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", "-c", help="Base serve config (YAML); default: the pair's."),
    pair: str | None = typer.Option(None, "--pair", help="Model pair: its default config, or --config's pair."),
    systems: str = typer.Option(
        ",".join(BENCH_SYSTEMS), help="Systems to compare (vllm-server: vLLM's own OpenAI server, large model)."
    ),
    routers: str = typer.Option("rstitch,r2r", help="Routing programs (rstitch, r2r, citer: their operating points)."),
    concurrency: str | None = typer.Option(
        None, "--concurrency", "-n", help="Closed-loop concurrencies N (1,4,8,16 unless --rate / --arrivals)."
    ),
    rate: str | None = typer.Option(
        None, "--rate", help="Open loop instead: Poisson arrival rates (requests/s), e.g. 2,4,8; one cell per rate."
    ),
    arrivals: Path | None = typer.Option(
        None, "--arrivals", help="Open loop instead: replay these arrival times (s; one a line or a JSON list)."
    ),
    arrival_seed: int | None = typer.Option(
        None, "--arrival-seed", help="Seed of --rate's arrivals; window k draws seed + k [0]."
    ),
    repetitions: int = typer.Option(3, min=1, help="Measured windows per system, router and N (or rate)."),
    max_tokens: int | None = typer.Option(None, min=2, help="Output tokens per request (without --lengths) [32]."),
    lengths: str | None = typer.Option(
        None, "--lengths", help="Lengths from a simulator preset: short-reasoning, long-reasoning, short-reasoning-cpu."
    ),
    length_scale: float | None = typer.Option(None, "--length-scale", help="Every length of --lengths times this [1]."),
    warmup_s: float = typer.Option(1.5, min=0.0, help="Warm-up before each window (s)."),
    window_s: float = typer.Option(4.0, min=0.5, help="Measurement window (s)."),
    direct: bool = typer.Option(True, help="Also drive plain vLLM directly (the overhead reference)."),
    min_gain: float = typer.Option(
        0.03, min=0.0, max=0.99, help="Delay batches only for a predicted gain over B=1 above this fraction."
    ),
    out: Path = typer.Option(Path("docs/bench"), "--out", help="Directory for bench.json, bench.md, bench.png."),
    drift: str = typer.Option("scale", "--drift", help="Drift probe before the bench: scale, stop, report or skip."),
    drift_tolerance: float = typer.Option(0.05, "--drift-tolerance", help="Relative drift beyond which stop stops."),
    stack: Path | None = typer.Option(
        None, "--stack", help="A crossval probe's stack.json: also simulate the routed systems with those costs."
    ),
) -> None:
    """Run every system x router x N (or x rate, open loop) on this machine and write JSON, markdown and a PNG."""
    import os
    import sys
    import time

    from tokenrouter import options as opt
    from trserve.bench.cells import BenchPlan
    from trserve.bench.client import Workload
    from trserve.bench.display import BenchDisplay
    from trserve.bench.drift import probe_bench
    from trserve.bench.outputs import write_outputs
    from trserve.bench.predict import check_one_copy
    from trserve.bench.runner import BenchRunner
    from trserve.bench.systems import check_names, check_systems_fit
    from trserve.bench.window_stats import check_num_models
    from trserve.config import ServeConfig
    from trserve.crossval.stack import load_stack
    from trserve.server.drift import DRIFT_MODES

    if length_scale is not None and lengths is None:  # before anything loads: it would scale nothing
        raise ConfigError("--length-scale", "scales --lengths; give --lengths too")
    if max_tokens is not None and lengths is not None:
        raise ConfigError("--max-tokens", "--lengths draws each request's output length; give one of them")
    if concurrency is not None and (rate is not None or arrivals is not None):
        raise ConfigError("--concurrency", "sets the closed loop; --rate / --arrivals the open loop: give one of them")
    opt.check_seconds(warmup_s, "--warmup-s")  # typer's min= lets inf through
    opt.check_seconds(window_s, "--window-s", 0.5)
    open_load = load_of(rate, arrivals, arrival_seed, warmup_s, window_s)
    if open_load is not None and opt.given(ctx, "direct"):
        raise ConfigError("--direct", "drives plain vLLM in a closed loop; --rate / --arrivals runs none: drop it")
    sys_names, router_names = _names(systems), _names(routers)
    check_names(sys_names, router_names)
    ns = (
        _ints(CLOSED_DEFAULT if concurrency is None else concurrency, "concurrency")
        if open_load is None
        else TABLE_CONCURRENCIES
    )
    if drift not in DRIFT_MODES:
        raise ConfigError("--drift", f"unknown mode {drift!r}; valid: {', '.join(DRIFT_MODES)}")
    opt.check_positive(drift_tolerance, "--drift-tolerance")
    from tokenrouter.commands.serve import _load

    base = _load(config, None, None, pair=pair).model_dump(mode="json")
    check_one_copy([m.get("replicas", 1) for m in base["models"]])
    check_systems_fit(base, sys_names)
    if "vllm-server" in sys_names and base.get("backend") != "vllm":
        raise ConfigError("systems", f"vllm-server needs real engines (backend: vllm), not {base.get('backend')!r}")
    fewest = min(m["max_num_seqs"] * m.get("replicas", 1) for m in base["models"])
    if max(ns) > fewest and base["mode"] != "per-token":  # else the server.max_active_requests the bench raised
        raise ConfigError("--concurrency", f"N = {max(ns)} keeps {max(ns)} requests active; the config's models hold "
                          f"{fewest} (max_num_seqs x replicas): raise their max_num_seqs or lower N")  # fmt: skip
    base["server"]["max_active_requests"] = max(base["server"]["max_active_requests"], max(ns))
    ServeConfig.model_validate(base)
    workload = Workload(
        32 if max_tokens is None else max_tokens, warmup_s, window_s, lengths=_lengths(lengths, length_scale, base)
    )
    check_num_models(len(base["models"]))  # before the probe starts engines
    costs = load_stack(stack, len(base["models"])) if stack is not None else None
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    probed = probe_bench(base, sys_names, drift, drift_tolerance, lambda msg: typer.echo(f"bench: {msg}", err=True))
    typer.echo(f"bench: {probed.line()}", err=True)
    plan = BenchPlan(sys_names, router_names, ns, repetitions, workload, base, direct and open_load is None,
                     min_gain=min_gain, drift=probed, stack=costs, open=open_load)  # fmt: skip
    runner = BenchRunner(plan, None)
    loads = len(ns) if open_load is None else len(open_load.keys)
    cells = loads * repetitions * (len([s for s in sys_names if s not in SINGLE_MODEL]) * len(router_names))
    cells += loads * repetitions * len([s for s in sys_names if s in SINGLE_MODEL])
    command = ("tokenrouter bench " + " ".join(sys.argv[2:])).strip()

    def write() -> dict[str, object]:
        load = {"load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]}
        return write_outputs(out, plan, runner, command, load, time.monotonic() - started)

    runner.on_checkpoint = write
    with BenchDisplay(cells) as display:
        runner.display = display
        runner.run()
    doc = write()
    typer.echo(f"bench: wrote {out}/bench.json, bench.md, bench.png in {doc['elapsed_s']:.0f} s")
    if open_load is None:
        typer.echo(f"bench: targets {doc['targets']}")
