"""The ensemble's tokenizer, loaded with transformers from a model checkpoint (front end and tools share it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class Tokenizer:
    """The ensemble's tokenizer (all models of a routed ensemble share one), loaded from model 0's checkpoint."""

    def __init__(self, model_path: str) -> None:
        from transformers import AutoTokenizer  # heavy: only where a tokenizer is built

        self.hf = AutoTokenizer.from_pretrained(model_path)
        self.eos_token_ids = frozenset(_eos_ids(self.hf, Path(model_path)))

    def encode(self, prompt: str) -> list[int]:
        return list(self.hf.encode(prompt))

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The chat template applied to ``messages`` with the assistant turn opened."""
        ids: Any = self.hf.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(token_ids), skip_special_tokens=True))


def _eos_ids(hf: Any, path: Path) -> set[int]:
    ids: set[int] = set()
    if hf.eos_token_id is not None:
        ids.add(int(hf.eos_token_id))
    gen_config = path / "generation_config.json"
    if gen_config.is_file():
        eos = json.loads(gen_config.read_text()).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else eos or [])
    return ids
