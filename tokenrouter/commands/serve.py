"""`tokenrouter serve` (the OpenAI-compatible routed server) and `tokenrouter demo` (start, load, print, stop)."""

from __future__ import annotations

from pathlib import Path

import typer

from tokenrouter import options as opt
from tokenrouter.errors import cli_errors, describe_validation_error, named_as_options

PAIR_OPTION = typer.Option(
    None, "--pair", help="Model pair (models/<pair>/): its default config, or the pair of --config [local-smollm2]."
)


def _load(  # type: ignore[no-untyped-def]
    config: Path | None, host: str | None, port: int | None, ray_address: str | None = None, pair: str | None = None
):
    """The serve config: ``config``, else the default config of ``pair`` (the local pair when None); ``pair``
    given with a config replaces the config's ``pair:``."""
    from pydantic import ValidationError

    from trcore.errors import ConfigError
    from trserve.config import ServeConfig, load_config
    from trserve.server.defaults import default_config
    from trsim.pairs import LOCAL_PAIR

    if pair is not None:
        opt.check_pair(pair)
    say = lambda line: typer.echo(line, err=True)  # noqa: E731  (stderr: --print-config's YAML stays clean)
    if config is None:
        try:
            cfg: ServeConfig = default_config(report=say, pair=pair or LOCAL_PAIR)
        except ConfigError as exc:  # what the named pair lacks is a problem of the --pair flag
            if exc.field != "pair":
                raise
            raise ConfigError("--pair", exc.problem) from None
    else:
        cfg = load_config(config, pair=pair)
    data = cfg.model_dump()
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    if overrides:
        data["server"] = {**data["server"], **overrides}
    if ray_address is not None:  # joins the config's cluster settings, or the defaults (PACK, CPU bundles)
        data["cluster"] = {**(data["cluster"] or {}), "backend": "ray", "address": ray_address}
    if not overrides and ray_address is None:
        return cfg
    flags = {"server.host": host, "server.port": port, "cluster.address": ray_address}
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as exc:  # a value a flag set: the error names the flag typed, as README promises
        line = describe_validation_error(exc)
        field = next((f for f, v in flags.items() if v is not None and line.startswith(f + ":")), None)
        if field is None:
            raise
        raise ConfigError(FLAG_OF[field], line) from None


#: The serve config's fields that ``serve``'s flags set.
FLAG_OF = {"server.host": "--host", "server.port": "--port", "cluster.address": "--ray-address"}


def _drift_probe(cfg, models):  # type: ignore[no-untyped-def]
    """The drift probe of ``thresholds: auto`` (imported only when it runs: it brings the crossval harness)."""
    from trserve.crossval.drift import serve_drift_probe

    return serve_drift_probe(cfg, models)


@cli_errors
def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the pair's."),
    pair: str | None = PAIR_OPTION,
    host: str | None = typer.Option(None, help="Bind address (overrides the config; default 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port (overrides the config; default 8000)."),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved config as YAML and exit."),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="Run the workers as Ray actors on this cluster ('auto': the one `ray start --head` made here); "
        "sets cluster.address.",
    ),
) -> None:
    """Serve the routed model ensemble over an OpenAI-compatible HTTP API until interrupted."""
    import logging

    from trserve import eventloop
    from trserve.config import dump_config
    from trserve.server.serve import serve as run_server

    cfg = _load(config, host, port, ray_address, pair)
    if print_config:
        typer.echo(dump_config(cfg), nl=False)
        return
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    say = lambda line: typer.echo(f"tokenrouter: {line}", err=True)  # noqa: E731
    flagged = ("cluster.address",) if ray_address is not None else ()  # the address the user typed
    with named_as_options(*flagged, option="--ray-address"):
        status = eventloop.run(run_server(cfg, report=say, probe=_drift_probe))
    if status:
        raise typer.Exit(status)


@cli_errors
def demo(
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the pair's."),
    pair: str | None = PAIR_OPTION,
    port: int = typer.Option(0, min=0, max=65535, help="Port for the temporary server (0: any free port)."),
    num_requests: int = typer.Option(16, min=1, help="Requests in the routed workload."),
    concurrency: int = typer.Option(8, min=1, help="Requests in flight at once."),
    max_tokens: int = typer.Option(32, min=1, help="Output tokens per request."),
) -> None:
    """Start the server, run a short routed workload against it, print throughput and a sample answer, stop."""
    from trcore.errors import ConfigError
    from trserve.server.demo import run_demo
    from trserve.server.process import free_port

    cfg = _load(config, "127.0.0.1", port or free_port(), pair=pair)
    if max_tokens >= cfg.max_model_len:
        raise ConfigError("--max-tokens", f"{max_tokens} leaves no room for a prompt in the models' context of "
                          f"{cfg.max_model_len} tokens (max_model_len)")  # fmt: skip
    status = run_demo(
        cfg,
        lambda line: typer.echo(line, err=line.startswith("error:")),
        num_requests=num_requests,
        concurrency=concurrency,
        max_tokens=max_tokens,
    )
    if status:
        raise typer.Exit(status)


if __name__ == "__main__":  # `python -m tokenrouter.commands.serve` = `tokenrouter serve` (used by ServerProcess)
    typer.run(serve)
