"""`tokenrouter train-routers`: train the r2r and citer token routers on a model pair's checkpoints (by default
the local pair's prepared ones), into that pair's folder."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import typer

from tokenrouter import options as opt
from tokenrouter.errors import cli_errors
from trserve.paths import PROMPTS_DIR


@cli_errors
def train_routers(
    pair: str = typer.Option("local-smollm2", "--pair", help="Model pair the routers are for (models/<pair>/)."),
    small: Path | None = typer.Option(None, help="Small-model checkpoint (default: the prepared pair)."),
    large: Path | None = typer.Option(None, help="Large-model checkpoint (default: the prepared pair)."),
    prompts: Path = typer.Option(PROMPTS_DIR / "routing.jsonl", help="JSONL prompts."),
    out_dir: Path | None = typer.Option(None, help="Where weights and metrics go (default: models/<pair>/routers)."),
    max_new_tokens: int = typer.Option(96, min=1, help="Greedy answer length per prompt."),
    top_k: int = typer.Option(10, min=2, max=20, help="Top-k logprobs the routers read (vLLM must return them)."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads."),
    route_rate: float = typer.Option(0.2, min=0.0, max=1.0, help="Fraction of validation tokens sent to the LLM."),
    seed: int = typer.Option(0, help="Training seed."),
    no_cache: bool = typer.Option(False, help="Regenerate the labelled data even if cached."),
) -> None:
    """Generate labelled data with the model pair, train both routers, write weights + metrics."""
    from trserve.paths import pair_dir
    from trserve.routers.training import FitConfig, run_training
    from trsim.pairs import load_pair

    loaded = load_pair(opt.check_pair(pair))
    small_dir, large_dir = _pair_dirs(loaded, small, large)
    if not prompts.is_file():
        raise FileNotFoundError(2, "No such file", str(prompts))
    command = (
        "tokenrouter train-routers " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 else "tokenrouter train-routers"
    )
    tokenizer = loaded.spec.tokenizer
    summary = run_training(
        small_dir,
        large_dir,
        prompts,
        out_dir or pair_dir(pair) / "routers",
        None if no_cache else _cache_dir(),
        max_new_tokens,
        top_k,
        command.strip(),
        FitConfig(route_rate=route_rate, seed=seed),
        threads=threads,
        pair={"name": pair, "tokenizer": {"vocab_size": tokenizer.vocab_size, "identity": tokenizer.identity}},
    )
    print(json.dumps(summary, indent=2))


def _cache_dir() -> Path:
    from trserve.paths import data_root

    return data_root() / "router_data"


def _pair_dirs(pair, small: Path | None, large: Path | None) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """The checkpoints to train on: given, or the prepared local pair; either way they must be the pair's."""
    from trcore.errors import ConfigError
    from trserve.modelprep.pair import model_dir
    from trserve.pairs.check import model_mismatch
    from trsim.pairs import LOCAL_PAIR

    if pair.name != LOCAL_PAIR and (small is None or large is None):
        raise ConfigError("--pair", f"{pair.name} has no checkpoints here (shapes only); give --small and --large")
    small = small if small is not None else model_dir("small")
    large = large if large is not None else model_dir("large")
    for index, (field, path) in enumerate((("small", small), ("large", large))):
        if not (path / "config.json").is_file():
            raise ConfigError(
                field, f"{path} is not a model checkpoint (no config.json); run `tokenrouter models prepare`"
            )
        problem = model_mismatch(pair, index, path)
        if problem:
            raise ConfigError(f"--{field}", f"{path} {problem}, not those of pair {pair.name}")
    return small, large
