"""The `tokenrouter` command: registers each command group's functions on one typer app."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="tokenrouter",
    help="Token-level routed LLM serving: throughput model, simulator, server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts are plain: "[the pair's]" is a default, not a rich markup tag
)


def _register() -> None:
    from tokenrouter.commands import analytic

    app.command("throughput")(analytic.throughput)
    app.command("optimize")(analytic.optimize)

    from tokenrouter.commands import sim

    app.command("simulate")(sim.simulate)
    app.command("sweep")(sim.sweep)

    from tokenrouter.commands import serve

    app.command("serve")(serve.serve)
    app.command("demo")(serve.demo)

    from tokenrouter.commands import routers

    app.command("train-routers")(routers.train_routers)

    from tokenrouter.commands import models

    app.add_typer(models.app, name="models")

    from tokenrouter.commands import calibrate

    app.command("calibrate")(calibrate.calibrate)

    from tokenrouter.commands import crossval

    app.command("crossval")(crossval.crossval)

    from tokenrouter.commands import bench

    app.command("bench")(bench.bench)

    from tokenrouter.commands import plan

    app.command("latency")(plan.latency)
    app.command("plan")(plan.plan)

    from tokenrouter.commands import quality

    app.add_typer(quality.app, name="quality")


_register()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
