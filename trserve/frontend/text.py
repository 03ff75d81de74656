"""Text on the front end: prompt and chat encoding, and incremental detokenization with stop strings."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from trserve.engine.tokenizer import Tokenizer

#: What a decoder writes for bytes that are not (yet) a whole UTF-8 character.
REPLACEMENT = "\ufffd"


class TextStream:
    """Turns output tokens into text deltas and stops at the first stop string.

    Text that could be the start of a stop string, and an incomplete UTF-8 character after it, is held back
    until the next tokens decide it; :meth:`finish` releases what is left. As in vLLM, a stop string counts only
    where it ends past the text of the first ``min_tokens`` tokens. :attr:`token_ids` are the output tokens of
    the answer: when a stop string ends it, the tokens after the one that completed the stop string are dropped
    (their text is cut). A token of ``stop_token_ids`` past the first ``min_tokens`` ends the request (the core
    finishes it there): as vLLM's detokenizer does, it stays in :attr:`token_ids` (and the usage) but its text is
    not part of the answer, nor searched for stop strings.

    Decoding is incremental (as vLLM's ``detokenize_incrementally``): each push decodes only a window of the
    last tokens, from ``_prefix`` (tokens decoded before, kept so that decoders whose output depends on the
    previous token, such as a leading space, see it) to the end, and appends what the window adds beyond the
    text of ``_prefix:_read``. The window moves on only once its text ends in a whole character, so
    :attr:`text` is always the full decode of :attr:`token_ids` (checked against it in
    tests/serve/frontend/test_text.py); a decoder whose window text does not extend its head falls back to a
    full decode."""

    def __init__(
        self, tokenizer: Tokenizer, stop: Sequence[str] = (), min_tokens: int = 0, stop_token_ids: Collection[int] = ()
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.min_tokens = min_tokens
        self.stop_token_ids = frozenset(stop_token_ids)
        self._ended = False  # a stop token came: nothing follows it
        self.token_ids: list[int] = []
        self.text = ""
        self.num_emitted = 0
        self.is_stopped = False
        self._holdback = max((len(s) for s in self.stop), default=1) - 1
        #: Length of the first ``min_tokens`` tokens' text (None until they exist): stop strings end past it.
        self._floor: int | None = 0 if min_tokens == 0 else None
        self._prefix = 0  # the window starts here
        self._read = 0  # text of token_ids[:_read] is final: _settled
        self._settled = ""
        self._head = ""  # decode(token_ids[_prefix:_read])

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; returns the text that is now certain. Sets :attr:`is_stopped` when a stop string hit."""
        if self.is_stopped or self._ended:
            return ""
        end = self._stop_token_end(token_ids)
        delta = self._push_text(token_ids[:end]) if end else ""
        if end < len(token_ids) and not self.is_stopped:
            self.token_ids.append(token_ids[end])  # the stop token: counted, its text left out (as vLLM)
            self._ended = True
        return delta

    def _stop_token_end(self, token_ids: Sequence[int]) -> int:
        """Where the first token that ends the request (a stop token past ``min_tokens``) is in ``token_ids``, or
        their length if none does."""
        for k, token in enumerate(token_ids):
            if token in self.stop_token_ids and len(self.token_ids) + k >= self.min_tokens:
                return k
        return len(token_ids)

    def _push_text(self, token_ids: Sequence[int]) -> str:
        self.token_ids.extend(token_ids)
        text = self._decode()
        if self._floor is None and len(self.token_ids) >= self.min_tokens:
            self._floor = len(self.tokenizer.decode(self.token_ids[: self.min_tokens]))
        hit = self._find_stop(text)
        if hit is not None:
            return self._stop(len(self.token_ids) - len(token_ids), text[:hit])
        self.text = text
        # A multi-byte character that is not complete yet is held back, and is not part of the stop hold-back.
        return self._emit(len(text) - self._holdback - (1 if text.endswith(REPLACEMENT) else 0))

    def finish(self) -> str:
        """The rest of the text once the request ended."""
        return self._emit(len(self.text))

    def _decode(self) -> str:
        """The full text of :attr:`token_ids`, decoding only the window since ``_prefix``."""
        window = self.tokenizer.decode(self.token_ids[self._prefix :])
        if not window.startswith(self._head):
            return self.tokenizer.decode(self.token_ids)
        new = window[len(self._head) :]
        text = self._settled + new
        if new and not new.endswith(REPLACEMENT):
            self._prefix, self._read, self._settled = self._read, len(self.token_ids), text
            self._head = new if self._prefix == 0 else self.tokenizer.decode(self.token_ids[self._prefix :])
        return text

    def _emit(self, upto: int) -> str:
        if upto <= self.num_emitted:
            return ""
        delta = self.text[self.num_emitted : upto]
        self.num_emitted = upto
        return delta

    def _stop(self, num_before: int, cut_text: str) -> str:
        """A stop string hit in the tokens pushed after ``num_before``: keep the tokens through the one that
        completes it and the text before it (the stream ends: the decode window is not used again)."""
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
