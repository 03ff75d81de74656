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


def tokens_by_id(tokenizer: object, where: str = "tokenizer.json") -> list[str | None]:
    """The token string of every id of a ``tokenizer.json`` document (BPE/WordPiece ``model.vocab`` plus
    ``added_tokens``); ids nothing names are None. A malformed document, or an id at or beyond the number of
    entries the file lists (the table would be mostly gaps), is a :class:`ConfigError` naming ``where``."""
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = tokenizer.get("added_tokens", []) if isinstance(tokenizer, dict) else None
    if not isinstance(vocab, list | dict):
        raise ConfigError(where, "has no model.vocab (a list of [piece, score] or a map of token -> id)")
    if not isinstance(added, list):
        raise ConfigError(where, f"added_tokens must be a list, got {type(added).__name__}")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        named = {i: _piece(entry, f"model.vocab.{i}", where) for i, entry in enumerate(vocab)}
    else:
        named = {_id(i, f"model.vocab.{token}", where): str(token) for token, i in vocab.items()}
    size = len(vocab) + len(added)
    for k, entry in enumerate(added):
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise ConfigError(where, f"added_tokens.{k} must be an object with an integer id and a string content")
        named[_id(entry.get("id"), f"added_tokens.{k}.id", where)] = entry["content"]
    beyond = max(named, default=-1)
    if beyond >= size:
        raise ConfigError(where, f"id {beyond} is beyond the {size} entries the file lists (ids 0 to {size - 1})")
    return [named.get(i) for i in range(beyond + 1)]


def _piece(entry: object, field: str, where: str) -> str:
    if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
        raise ConfigError(where, f"{field} must be [piece, score], got {entry!r}")
    return entry[0]


def _id(value: object, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(where, f"{field} must be a token id (an integer >= 0), got {value!r}")
    return value


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid JSON ({exc})") from None


def tokenizer_identity(model_dir: Path) -> TokenizerIdentity | None:
    """The identity of the tokenizer saved in ``model_dir`` (its ``tokenizer.json``); None when there is none
    (a shape-only directory, an emulated model)."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    tokens = tokens_by_id(_read_json(path), str(path))
    table = json.dumps(tokens, ensure_ascii=False, separators=(",", ":")).encode()
    return TokenizerIdentity(len(tokens), hashlib.sha256(table).hexdigest())


def model_dims(model_dir: Path) -> dict[str, int] | None:
    """The :data:`DIM_FIELDS` of the checkpoint in ``model_dir`` (its ``config.json``); None without one."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ConfigError(str(path), "must be a JSON object")
    for key in DIM_FIELDS:
        if key in config and (isinstance(config[key], bool) or not isinstance(config[key], int)):
            raise ConfigError(str(path), f"{key} must be an integer, got {config[key]!r}")
    return {key: config[key] for key in DIM_FIELDS if key in config}
