"""Incremental detokenization (trserve/frontend/text.py) against a full decode, with the ensemble's real
tokenizer (byte-level BPE, from the prepared model pair) and the byte-level stand-in.

Properties (hypothesis): after every push the stream's text is exactly ``tokenizer.decode`` of all its tokens;
the streamed deltas add up to the full decode cut at the first stop string; multi-byte characters split across
tokens are never streamed half-made; and the whole streamed answer is what a stream that decodes every token
list in full (the straightforward algorithm, written out below) streams, stop strings and ``min_tokens``
included.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trserve.engine.stand_in_tokenizer import StandInTokenizer
from trserve.engine.tokenizer import Tokenizer
from trserve.frontend.text import REPLACEMENT, TextStream

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Text with multi-byte characters (accents, CJK, emoji: 2-4 UTF-8 bytes) that byte-level BPE splits over tokens.
PIECES = [*"ab .\n", "é", "ß", "中", "文", "🙂", "👍🏽", "ॐ", " the"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@pytest.fixture(scope="module")
def tokenizer(prepared_pair: tuple[Path, Path]) -> Tokenizer:
    return Tokenizer(str(prepared_pair[1]))


class FullDecodeStream:
    """The reference: the same hold-back, ``min_tokens`` and stop rules, decoding the whole token list on every
    push (and, on a stop, every prefix of the last push, to find the token that completed it)."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str], min_tokens: int) -> None:
        self.tokenizer, self.stop, self.min_tokens = tokenizer, [s for s in stop if s], min_tokens
        self.ids: list[int] = []
        self.text, self.emitted, self.stopped = "", 0, False
        self.holdback = max((len(s) for s in self.stop), default=1) - 1

    def find(self, ids: list[int]) -> int | None:
        if len(ids) < self.min_tokens and len(self.ids) < self.min_tokens:
            return None
        floor = len(self.tokenizer.decode(self.ids[: self.min_tokens]))
        text = self.tokenizer.decode(ids)
        start = max(0, self.emitted - self.holdback)
        hits = [i for i in (text.find(s, max(start, floor - len(s) + 1)) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def push(self, ids: Sequence[int]) -> str:
        if self.stopped:
            return ""
        before = len(self.ids)
        self.ids += ids
        if self.find(self.ids) is not None:
            self.stopped = True
            k = next(
                k
                for k in range(max(before + 1, self.min_tokens), len(self.ids) + 1)
                if self.find(self.ids[:k]) is not None
            )
            del self.ids[k:]
            text = self.tokenizer.decode(self.ids)
            self.text = text[: self.find(self.ids)]
            return self.take(len(self.text))
        text = self.text = self.tokenizer.decode(self.ids)
        return self.take(len(text) - self.holdback - (1 if text.endswith(REPLACEMENT) else 0))

    def take(self, upto: int) -> str:
        if upto <= self.emitted:
            return ""
        out, self.emitted = self.text[self.emitted : upto], upto
        return out


def split(ids: list[int], cuts: list[int]) -> list[list[int]]:
    """``ids`` in pieces at the (sorted, deduplicated) cut points."""
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in itertools.pairwise(points)]


def stream_all(stream: TextStream, pieces: list[list[int]], tokenizer: Tokenizer | StandInTokenizer) -> str:
    """Push every piece, checking the text is the full decode after each; the streamed answer. For tokens of
    valid text, no delta holds a replacement character (half of a multi-byte character)."""
    valid = REPLACEMENT not in tokenizer.decode([i for p in pieces for i in p])
    out = []
    for piece in pieces:
        out.append(stream.push(piece))
        assert not (valid and REPLACEMENT in out[-1]), "half a character streamed"
        if stream.is_stopped:
            break
        assert stream.text == tokenizer.decode(stream.token_ids)
    out.append(stream.finish())
    return "".join(out)


@SETTINGS
@given(text=TEXT, cuts=st.lists(st.integers(0, 200), max_size=12))
def test_streamed_text_is_the_full_decode(tokenizer: Tokenizer, text: str, cuts: list[int]) -> None:
    ids = tokenizer.encode(text)
    streamed = stream_all(TextStream(tokenizer), split(ids, cuts), tokenizer)
    assert streamed == tokenizer.decode(ids)


@SETTINGS
@given(
    ids=st.lists(st.integers(0, 49_151), max_size=30) | st.lists(st.integers(49_100, 49_170), max_size=10),
    cuts=st.lists(st.integers(0, 60), max_size=10),
)
def test_any_token_ids_stream_their_full_decode(tokenizer: Tokenizer, ids: list[int], cuts: list[int]) -> None:
    """Arbitrary ids: invalid byte sequences, special and added tokens, single bytes of one character."""
    ids = [i for i in ids if i < len(tokenizer.hf)]
    streamed = stream_all(TextStream(tokenizer), split(ids, cuts), tokenizer)
    assert streamed == tokenizer.decode(ids)


@SETTINGS
@given(
    text=TEXT,
    cuts=st.lists(st.integers(0, 200), max_size=12),
    where=st.tuples(st.integers(0, 60), st.integers(1, 5)),
)
def test_a_stop_string_cuts_the_full_decode_at_its_first_occurrence(
    tokenizer: Tokenizer, text: str, cuts: list[int], where: tuple[int, int]
) -> None:
    ids = tokenizer.encode(text)
    full = tokenizer.decode(ids)
    stop = full[where[0] % (len(full) + 1) :][: where[1]] or "zz"
    streamed = stream_all(TextStream(tokenizer, [stop]), split(ids, cuts), tokenizer)
    assert streamed == (full[: full.find(stop)] if stop in full else full)


@SETTINGS
@given(
    text=TEXT,
    cuts=st.lists(st.integers(0, 200), max_size=12),
    stops=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 6)), max_size=3),
    min_tokens=st.integers(0, 12),
)
def test_stops_and_min_tokens_stream_what_a_full_decode_streams(
    tokenizer: Tokenizer, text: str, cuts: list[int], stops: list[tuple[int, int]], min_tokens: int
) -> None:
    ids = tokenizer.encode(text)
    full = tokenizer.decode(ids)
    stop = [full[a % (len(full) + 1) :][:n] for a, n in stops]
    pieces = split(ids, cuts)
    reference = FullDecodeStream(tokenizer, stop, min_tokens)
    expected = "".join([*(reference.push(p) for p in pieces), reference.take(len(reference.text))])
    stream = TextStream(tokenizer, stop, min_tokens)
    assert stream_all(stream, pieces, tokenizer) == expected
    assert stream.token_ids == reference.ids


@SETTINGS
@given(ids=st.lists(st.integers(0, 70_000), max_size=40), cuts=st.lists(st.integers(0, 50), max_size=8))
def test_stand_in_tokenizer_streams_its_full_decode(ids: list[int], cuts: list[int]) -> None:
    stand_in = StandInTokenizer()
    assert stream_all(TextStream(stand_in), split(ids, cuts), stand_in) == "".join(f" t{i}" for i in ids)  # type: ignore[arg-type]


def test_a_character_split_over_byte_tokens_waits_for_its_last_byte(tokenizer: Tokenizer) -> None:
    """'🙂' is 4 UTF-8 bytes; pushed one byte-token at a time, nothing is streamed until the last arrives."""
    ids = tokenizer.encode("a🙂")
    assert len(ids) >= 3, "the emoji should need several byte tokens"
    stream = TextStream(tokenizer)
    deltas = [stream.push([i]) for i in ids]
    assert deltas[0] == "a" and all(d == "" for d in deltas[1:-1]) and deltas[-1] == "🙂"


class CountingTokenizer:
    """The real tokenizer, counting how many token ids it was asked to decode."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner, self.decoded = inner, 0

    def decode(self, ids: Sequence[int]) -> str:
        self.decoded += len(ids)
        return self.inner.decode(ids)


def test_each_push_decodes_a_window_not_the_whole_list(tokenizer: Tokenizer) -> None:
    """One token at a time over 400 tokens (with characters split over tokens), the decoder sees a few ids per
    push, not all of them (a full decode per push would be 80,000 ids); the text stays the full decode."""
    ids = tokenizer.encode("Streaming ॐ, 𝄞 and 👍🏽 (split over byte tokens), token by token. " * 20)[:400]
    counting = CountingTokenizer(tokenizer)
    stream = TextStream(counting, ["never"])  # type: ignore[arg-type]
    streamed = "".join([*(stream.push([i]) for i in ids), stream.finish()])
    assert streamed == tokenizer.decode(ids)
    assert counting.decoded <= 8 * len(ids)
