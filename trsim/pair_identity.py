"""What makes two sets of models "the same pair" for a pair-specific artifact: the tokenizer's identity and the
models' dimensions, read from a checkpoint directory without transformers.

A tokenizer's identity is its vocabulary size and the sha256 of its id -> token table: the token strings in id
order (regular vocabulary and added tokens, a gap as ``null``) written as compact JSON. It is computed from
``tokenizer.json`` alone, so it does not change with the library that saved the file, its formatting or the order
of its keys, and it changes with any token that moved or was renamed: exactly what breaks a router that keeps a
learned row per token id. Shape-only pairs have no tokenizer files; their identity is the published tokenizer's
name (an HF repo id) and size, the hash left out (docs/models.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError

#: The ``config.json`` fields compared between a pair's model and the model a config serves.
DIM_FIELDS = ("num_hidden_layers", "hidden_size", "vocab_size")


@dataclass(frozen=True)
class TokenizerIdentity:
    """A tokenizer as routers see it: how many ids, and the hash of the id -> token table (None: not known)."""

    vocab_size: int
    sha256: str | None

    def describe(self) -> str:
        digest = self.sha256[:12] if self.sha256 else "no hash"
        return f"vocab {self.vocab_size}, sha256 {digest}"


def tokens_by_id(tokenizer: dict[str, Any]) -> list[str | None]:
    """The token string of every id of a ``tokenizer.json`` document (BPE/WordPiece ``model.vocab`` plus
    ``added_tokens``); ids nothing names are None."""
    vocab = tokenizer.get("model", {}).get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        named = {i: str(entry[0]) for i, entry in enumerate(vocab)}
    elif isinstance(vocab, dict):
        named = {int(i): str(token) for token, i in vocab.items()}
    else:
        raise ConfigError("tokenizer", "tokenizer.json has no model.vocab")
    for added in tokenizer.get("added_tokens", []):
        named[int(added["id"])] = str(added["content"])
    size = max(named) + 1 if named else 0
    return [named.get(i) for i in range(size)]


def tokenizer_identity(model_dir: Path) -> TokenizerIdentity | None:
    """The identity of the tokenizer saved in ``model_dir`` (its ``tokenizer.json``); None when there is none
    (a shape-only directory, an emulated model)."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    tokens = tokens_by_id(json.loads(path.read_text()))
    table = json.dumps(tokens, ensure_ascii=False, separators=(",", ":")).encode()
    return TokenizerIdentity(len(tokens), hashlib.sha256(table).hexdigest())


def model_dims(model_dir: Path) -> dict[str, int] | None:
    """The :data:`DIM_FIELDS` of the checkpoint in ``model_dir`` (its ``config.json``); None without one."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    return {key: int(config[key]) for key in DIM_FIELDS if key in config}
