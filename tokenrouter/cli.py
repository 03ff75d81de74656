"""The `tokenrouter` command: registers each command group's functions on one typer app."""

from __future__ import annotations

import sys

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


# click's exception classes, wherever this typer keeps them (its own copy of click, or click itself)
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    """Console-script entry point. Click's own usage errors (an unknown option, a value of the wrong type or out
    of range, a missing argument) are one line with exit status 2, like every other bad input."""
    command = typer.main.get_command(app)
    try:
        code = command.main(prog_name="tokenrouter", standalone_mode=False)
    except _CLICK_ERROR as exc:
        if isinstance(exc, _USAGE_ERROR) and type(exc).__name__ != "NoArgsIsHelpError":  # that one shows help
            where = exc.ctx.command_path if exc.ctx is not None else "tokenrouter"
            print(f"error: {exc.format_message()} (see '{where} --help')", file=sys.stderr)
        else:
            exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
