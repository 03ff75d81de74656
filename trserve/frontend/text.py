"""Text on the front end: prompt and chat encoding, and incremental detokenization with stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from trserve.engine.tokenizer import Tokenizer


class TextStream:
    """Turns output tokens into text deltas and stops at the first stop string.

    Text that could be the start of a stop string, or an incomplete UTF-8 character, is held back until the
    next tokens decide it; :meth:`finish` releases what is left. As in vLLM, stop strings are looked for only
    once ``min_tokens`` tokens exist."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = (), min_tokens: int = 0) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.min_tokens = min_tokens
        self.token_ids: list[int] = []
        self.text = ""
        self.num_emitted = 0
        self.is_stopped = False
        self._holdback = max((len(s) for s in self.stop), default=1) - 1

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; returns the text that is now certain. Sets :attr:`is_stopped` when a stop string hit."""
        if self.is_stopped:
            return ""
        self.token_ids.extend(token_ids)
        text = self.tokenizer.decode(self.token_ids)
        hit = self._find_stop(text) if len(self.token_ids) >= self.min_tokens else None
        if hit is not None:
            self.is_stopped = True
            self.text = text[:hit]
            return self._emit(len(self.text))
        self.text = text
        safe = len(text) - self._holdback
        if text.endswith("\ufffd"):  # a multi-byte character is not complete yet
            safe = min(safe, len(text) - 1)
        return self._emit(safe)

    def finish(self) -> str:
        """The rest of the text once the request ended."""
        return self._emit(len(self.text))

    def _emit(self, upto: int) -> str:
        if upto <= self.num_emitted:
            return ""
        delta = self.text[self.num_emitted : upto]
        self.num_emitted = upto
        return delta

    def _find_stop(self, text: str) -> int | None:
        start = max(0, self.num_emitted - self._holdback)
        hits = [i for i in (text.find(s, start) for s in self.stop) if i >= 0]
        return min(hits) if hits else None
