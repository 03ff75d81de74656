"""A tokenizer for servers without checkpoints (``backend: emulated`` with no model ``path``).

Text becomes one token per UTF-8 byte (ids ``BYTE_OFFSET + byte``, outside the hash engines' token range), and any
token id decodes to a short word, so streamed text is deterministic and readable without transformers or a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from trserve.engine.tokenizer import Tokenizer

#: Byte ``b`` is token ``BYTE_OFFSET + b`` (the hash engines write ids from 200 up; bytes land below).
BYTE_OFFSET = 3


class StandInTokenizer:
    """Byte-level encode, word-per-token decode; no end-of-sequence token (requests end at ``max_tokens``)."""

    eos_token_ids: frozenset[int] = frozenset()

    def encode(self, prompt: str) -> list[int]:
        return [BYTE_OFFSET + b for b in prompt.encode()]

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Each message as ``role: content`` on its own line, then the assistant turn opened."""
        text = "".join(f"{m.get('role', '')}: {m.get('content', '')}\n" for m in messages)
        return self.encode(text + "assistant:")

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(f" t{int(t)}" for t in token_ids)


def load_tokenizer(model_path: str | None) -> Tokenizer | StandInTokenizer:
    """The checkpoint's tokenizer, or the stand-in when there is no checkpoint (empty or None path)."""
    return Tokenizer(model_path) if model_path else StandInTokenizer()
