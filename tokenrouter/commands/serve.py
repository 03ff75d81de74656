"""`tokenrouter serve` (the OpenAI-compatible routed server) and `tokenrouter demo` (start, load, print, stop)."""

from __future__ import annotations

from pathlib import Path

import typer

from tokenrouter.errors import cli_errors


def _load(config: Path | None, host: str | None, port: int | None, ray_address: str | None = None):  # type: ignore[no-untyped-def]
    from trserve.config import ServeConfig, load_config
    from trserve.server.defaults import default_config

    say = lambda line: typer.echo(line, err=True)  # noqa: E731  (stderr: --print-config's YAML stays clean)
    cfg: ServeConfig = load_config(config) if config is not None else default_config(report=say)
    data = cfg.model_dump()
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    if overrides:
        data["server"] = {**data["server"], **overrides}
    if ray_address is not None:  # joins the config's cluster settings, or the defaults (PACK, CPU bundles)
        data["cluster"] = {**(data["cluster"] or {}), "backend": "ray", "address": ray_address}
    return ServeConfig.model_validate(data) if overrides or ray_address is not None else cfg


def _drift_probe(cfg, models):  # type: ignore[no-untyped-def]
    """The drift probe of ``thresholds: auto`` (imported only when it runs: it brings the crossval harness)."""
    from trserve.crossval.drift import serve_drift_probe

    return serve_drift_probe(cfg, models)


@cli_errors
def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the local pair."),
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

    cfg = _load(config, host, port, ray_address)
    if print_config:
        typer.echo(dump_config(cfg), nl=False)
        return
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    say = lambda line: typer.echo(f"tokenrouter: {line}", err=True)  # noqa: E731
    status = eventloop.run(run_server(cfg, report=say, probe=_drift_probe))
    if status:
        raise typer.Exit(status)


@cli_errors
def demo(
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the local pair."),
    port: int = typer.Option(0, min=0, max=65535, help="Port for the temporary server (0: any free port)."),
    num_requests: int = typer.Option(16, min=1, help="Requests in the routed workload."),
    concurrency: int = typer.Option(8, min=1, help="Requests in flight at once."),
    max_tokens: int = typer.Option(32, min=1, help="Output tokens per request."),
) -> None:
    """Start the server, run a short routed workload against it, print throughput and a sample answer, stop."""
    from trserve.server.demo import run_demo
    from trserve.server.process import free_port

    cfg = _load(config, "127.0.0.1", port or free_port())
    status = run_demo(
        cfg,
        config,
        lambda line: typer.echo(line, err=line.startswith("error:")),
        num_requests=num_requests,
        concurrency=concurrency,
        max_tokens=max_tokens,
    )
    if status:
        raise typer.Exit(status)


if __name__ == "__main__":  # `python -m tokenrouter.commands.serve` = `tokenrouter serve` (used by ServerProcess)
    typer.run(serve)
