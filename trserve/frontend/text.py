"""Text on the front end: prompt and chat encoding, and incremental detokenization with stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from trserve.engine.tokenizer import Tokenizer


class TextStream:
    """Turns output tokens into text deltas and stops at the first stop string.

    Text that could be the start of a stop string, or an incomplete UTF-8 character, is held back until the
    next tokens decide it; :meth:`finish` releases what is left. As in vLLM, a stop string counts only where it
    ends past the text of the first ``min_tokens`` tokens. :attr:`token_ids` are the output tokens of the
    answer: when a stop string ends it, the tokens after the one that completed the stop string are dropped
    (their text is cut)."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = (), min_tokens: int = 0) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.min_tokens = min_tokens
        self.token_ids: list[int] = []
        self.text = ""
        self.num_emitted = 0
        self.is_stopped = False
        self._holdback = max((len(s) for s in self.stop), default=1) - 1
        #: Length of the first ``min_tokens`` tokens' text (None until they exist): stop strings end past it.
        self._floor: int | None = 0 if min_tokens == 0 else None

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; returns the text that is now certain. Sets :attr:`is_stopped` when a stop string hit."""
        if self.is_stopped:
            return ""
        self.token_ids.extend(token_ids)
        text = self.tokenizer.decode(self.token_ids)
        if self._floor is None and len(self.token_ids) >= self.min_tokens:
            self._floor = len(self.tokenizer.decode(self.token_ids[: self.min_tokens]))
        hit = self._find_stop(text)
        if hit is not None:
            return self._stop(len(self.token_ids) - len(token_ids), text[:hit])
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

    def _stop(self, num_before: int, cut_text: str) -> str:
        """A stop string hit in the tokens pushed after ``num_before``: keep the tokens through the one that
        completes it and the text before it."""
        self.is_stopped = True
        del self.token_ids[self._first_stopping_prefix(num_before) :]
        kept = self.tokenizer.decode(self.token_ids)
        cut = self._find_stop(kept)
        self.text = kept[:cut] if cut is not None else cut_text
        return self._emit(len(self.text))

    def _first_stopping_prefix(self, num_before: int) -> int:
        """How many tokens stay when a push of several tokens hit a stop string: up to the token that completes
        the first stop string, as if the tokens had come one at a time (as vLLM checks them), so the answer does
        not depend on how the models' reports grouped them. The rest are cut from the output."""
        for k in range(max(num_before + 1, self.min_tokens), len(self.token_ids)):
            if self._find_stop(self.tokenizer.decode(self.token_ids[:k])) is not None:
                return k
        return len(self.token_ids)

    def _find_stop(self, text: str) -> int | None:
        if self._floor is None:
            return None
        start = max(0, self.num_emitted - self._holdback)
        hits = [i for i in (text.find(s, max(start, self._floor - len(s) + 1)) for s in self.stop) if i >= 0]
        return min(hits) if hits else None
