"""Pair-specific artifacts refuse the wrong models: checked at start-up, before any process starts.

A trained router belongs to the pair it was trained on (its metadata names it, or it lives in that pair's
folder). It serves another pair only when both share the tokenizer identity and the models' dimensions; the
served checkpoints must match the pair too (their ``tokenizer.json`` hash and ``config.json`` dimensions). Any
mismatch is one error naming both sides; ``allow_other_pair: true`` in the config turns it into a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from trcore.errors import ConfigError
from trcore.programs.mlp import MLPRouter
from trserve.config import ServeConfig
from trserve.pairs.fill import LEARNED_PROGRAMS
from trsim.pair_identity import model_dims, tokenizer_identity
from trsim.pairs import Pair, load_pair, pair_of_router

log = logging.getLogger(__name__)
OVERRIDE = "set allow_other_pair: true in the config to use it anyway"


def describe(pair: Pair) -> str:
    """A pair's identity in one phrase: tokenizer and the models' layers / hidden size."""
    dims = "; ".join(
        f"{m.name} {d.num_hidden_layers} layers x {d.hidden_size}"
        for m, d in ((m, pair.dims(i)) for i, m in enumerate(pair.spec.models))
    )
    tok = pair.spec.tokenizer
    identity = tok.identity[:19] if tok.sha256 else tok.identity  # a hash shortened, a name whole
    return f"pair {pair.name} (tokenizer {identity}, vocab {tok.vocab_size}; {dims})"


def same_identity(a: Pair, b: Pair) -> bool:
    """Whether an artifact of pair ``a`` fits pair ``b``: same tokenizer identity and size, same model dims."""
    ta, tb = a.spec.tokenizer, b.spec.tokenizer
    if (ta.identity, ta.vocab_size) != (tb.identity, tb.vocab_size) or len(a.spec.models) != len(b.spec.models):
        return False
    return all(a.dims(i) == b.dims(i) for i in range(len(a.spec.models)))


def check_pair(cfg: ServeConfig, model_paths: Sequence[str]) -> None:
    """Refuse a router of another pair and checkpoints that are not the pair's (ConfigError naming both)."""
    pair = load_pair(cfg.pair) if cfg.pair is not None else None
    router_pair = _router_pair(cfg)
    if router_pair is not None and pair is not None and not same_identity(router_pair, pair):
        _refuse(cfg, f"router.params.router: the router of {describe(router_pair)} cannot route {describe(pair)}")
    expected = pair or router_pair
    router_file = _router_file(cfg)
    if expected is not None and router_file is not None:
        problem = router_weights_mismatch(router_file, expected)
        if problem:
            _refuse(cfg, f"router.params.router: {router_file} {problem}: it was not trained on {describe(expected)}")
    if expected is None or cfg.backend != "vllm":
        return
    for i, path in enumerate(model_paths):
        candidates = _pair_models(expected, cfg, i)
        problems = [model_mismatch(expected, k, Path(path)) for k in candidates]
        if all(problems):
            what = "its router's " if pair is None else ""
            _refuse(cfg, f"models.{i}.path: {path} {problems[0]}, not those of {what}{describe(expected)}")


def _pair_models(pair: Pair, cfg: ServeConfig, index: int) -> list[int]:
    """Which of the pair's models config model ``index`` must be: the one of its name; else the one at its
    place when the config has as many models as the pair; else any (a single-model config of an unnamed one)."""
    names = [m.name for m in pair.spec.models]
    name = cfg.models[index].name
    if name in names:
        return [names.index(name)]
    return [index] if len(cfg.models) == len(names) else list(range(len(names)))


def _router_file(cfg: ServeConfig) -> Path | None:
    """The trained router a learned program reads (None: another program, or none named)."""
    if cfg.router.program not in LEARNED_PROGRAMS or not isinstance(cfg.router.params.get("router"), str):
        return None
    return Path(cfg.router.params["router"])


def router_weights_mismatch(path: Path, pair: Pair) -> str | None:
    """What the router's own weights show of the small model it was trained on, where that is not ``pair``'s
    (its token table has one row per vocabulary id; a hidden-state router reads that model's width)."""
    router, small = MLPRouter.load(path), pair.dims(0)
    if router.token_table is not None and router.token_table.shape[0] != small.vocab_size:
        return f"has a token table of {router.token_table.shape[0]} ids, not the small model's {small.vocab_size}"
    if router.hidden_dim and router.hidden_dim != small.hidden_size:
        return f"reads a hidden state of width {router.hidden_dim}, not the small model's {small.hidden_size}"
    return None


def _router_pair(cfg: ServeConfig) -> Pair | None:
    path = _router_file(cfg)
    if path is None:
        return None
    name = pair_of_router(path)
    if name is None:
        _refuse(cfg, f"router.params.router: {path} names no model pair and lies in no models/<pair>/ folder")
        return None
    try:
        return load_pair(name)
    except ConfigError as exc:  # the router's pair, not the config's: blame the router
        why = exc.problem if exc.field == "pair" else str(exc)
        _refuse(cfg, f"router.params.router: {path} was trained on pair {name!r}, which does not load here ({why})")
        return None


def model_mismatch(pair: Pair, index: int, path: Path) -> str | None:
    """What makes the checkpoint at ``path`` differ from model ``index`` of ``pair`` (None: nothing known)."""
    dims = model_dims(path)
    want = pair.dims(index).model_dump()
    if dims is not None and any(dims.get(key) != value for key, value in want.items()):
        return f"has dims {dims}"
    tokenizer, spec = tokenizer_identity(path), pair.spec.tokenizer
    if tokenizer is not None and spec.sha256 is not None and tokenizer.sha256 != spec.sha256:
        return f"has tokenizer {tokenizer.describe()}"
    return None


def _refuse(cfg: ServeConfig, message: str) -> None:
    if cfg.allow_other_pair:
        log.warning("allow_other_pair: %s", message)
        return
    field, _, problem = message.partition(": ")
    raise ConfigError(field, f"{problem}; {OVERRIDE}")
