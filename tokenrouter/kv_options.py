"""The KV-cache flags of `tokenrouter simulate`: capacity per model in tokens or blocks,
block size, sequence limit and spill policy, turned into a ``trsim.kv.KVSimConfig``. Bad values are a
``ConfigError`` naming the flag (one line, exit 2)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from trcore.errors import ConfigError

if TYPE_CHECKING:
    from trsim.config import SimConfig

KV_TOKENS_OPTION = typer.Option(
    None,
    "--kv-tokens",
    help="KV cache per model in tokens, one for all or one per model ('2304,4608'); 'auto': the roofline's HBM "
    "figure [memory free].",
)
KV_BLOCKS_OPTION = typer.Option(None, "--kv-blocks", help="KV cache per model in blocks (instead of --kv-tokens).")
KV_BLOCK_SIZE_OPTION = typer.Option(None, "--kv-block-size", help="KV block size in tokens [16].")
KV_MAX_SEQS_OPTION = typer.Option(None, "--kv-max-seqs", help="Requests that may hold KV per model [no limit].")
SPILL_OPTION = typer.Option(None, "--spill", help="When the KV cache is full: cost [default], lru, admission-limit.")


@dataclass(frozen=True)
class KVFlags:
    """The flags as given (None: not given)."""

    tokens: str | None = None
    blocks: str | None = None
    block_size: int | None = None
    max_seqs: int | None = None
    spill: str | None = None

    @property
    def gives_capacity(self) -> bool:
        return self.tokens is not None or self.blocks is not None


def apply_kv_flags(config: SimConfig, flags: KVFlags, scenario_file: Path | None = None) -> SimConfig:
    """``config`` with the flags' KV caches (replacing a scenario's, whose ``spill`` holds unless ``--spill`` is
    given) or spill policy; unchanged without flags. ``auto`` reads the capacity a model's latency profile in
    ``scenario_file`` recorded, as ``tokens: auto`` in the scenario does, else the roofline's."""
    from trcore import spill_policy
    from trsim.kv import KVSimConfig

    if flags.spill is not None:
        try:
            spill_policy(flags.spill)
        except ConfigError as exc:
            raise ConfigError("--spill", exc.problem) from None
    if not flags.gives_capacity:
        if flags.block_size is not None or flags.max_seqs is not None:
            option = "--kv-block-size" if flags.block_size is not None else "--kv-max-seqs"
            raise ConfigError(option, "needs --kv-tokens or --kv-blocks")
        if flags.spill is None:
            return config
        if config.kv is None:
            raise ConfigError("--spill", "needs a KV cache: give --kv-tokens or --kv-blocks (or scenario kv sections)")
        return replace(config, kv=KVSimConfig(config.kv.budgets, flags.spill))
    budgets = tuple(_budgets(config, flags, scenario_file))
    spill = flags.spill or (config.kv.spill if config.kv is not None else "cost")  # a scenario's spill: stays
    return replace(config, kv=KVSimConfig(budgets, spill))


def _budgets(config: SimConfig, flags: KVFlags, scenario_file: Path | None) -> list[object]:
    from trsim.kv import make_budget

    if flags.tokens is not None and flags.blocks is not None:
        raise ConfigError("--kv-blocks", "give --kv-tokens or --kv-blocks, not both")
    for name, value in (("--kv-block-size", flags.block_size), ("--kv-max-seqs", flags.max_seqs)):
        if value is not None and value < 1:
            raise ConfigError(name, f"must be >= 1, got {value}")
    option = "--kv-tokens" if flags.tokens is not None else "--kv-blocks"
    values = _per_model(flags.tokens or flags.blocks or "", config.num_models, option)
    budgets = []
    for m, value in enumerate(values):
        tokens = value if option == "--kv-tokens" else None
        blocks = None if option == "--kv-tokens" else value
        if blocks == "auto":
            raise ConfigError(option, "'auto' is for --kv-tokens")
        source = (config.latency[m], _profile(config, scenario_file, m) if value == "auto" else None)
        budgets.append(make_budget(tokens, blocks, flags.block_size, flags.max_seqs, source, option))  # type: ignore[arg-type]
    return budgets


def _profile(config: SimConfig, scenario_file: Path | None, model: int) -> Any:
    """Model ``model``'s latency profile in ``scenario_file``; None without one (or where the scenario's baseline
    left fewer models than the file lists)."""
    from trsim.profile import load_profile
    from trsim.scenario import load_scenario

    if scenario_file is None:
        return None
    models = load_scenario(scenario_file).models
    if len(models) != config.num_models or not models[model].latency.profile:
        return None
    return load_profile(scenario_file.parent / str(models[model].latency.profile))


def _per_model(text: str, num_models: int, option: str) -> list[int | str]:
    """``a`` (every model) or ``a,b,...`` (one per model); each a positive integer or ``auto``."""
    parts = [p.strip() for p in text.split(",")]
    values: list[int | str] = []
    for part in parts:
        if part == "auto":
            values.append(part)
        elif part.isascii() and part.isdigit() and int(part) > 0:  # not '²', which isdigit() takes and int() not
            values.append(int(part))
        else:
            raise ConfigError(
                option, f"expected positive integers or 'auto' (one for all or one per model), got {text!r}"
            )
    if len(values) == 1:
        return values * num_models
    if len(values) != num_models:
        raise ConfigError(option, f"needs 1 or {num_models} values (one per model), got {len(values)}")
    return values
