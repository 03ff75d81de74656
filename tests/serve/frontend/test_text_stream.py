"""Stop strings on the front end's text stream (the local pair's real tokenizer): the answer keeps the tokens
through the one that completes the stop string, whether the models' reports brought the tokens one by one or
all at once, so the output tokens (and the models that wrote them) stay aligned with the text."""

from __future__ import annotations

import functools

import pytest

from tests.serve.engine_support import model_dirs
from trserve.engine.tokenizer import Tokenizer
from trserve.frontend.text import TextStream

TEXT = " The quick brown fox jumps over the lazy dog. Then it sleeps under a tree until noon."


@functools.cache
def tokenizer() -> Tokenizer:
    return Tokenizer(model_dirs()[0])


def run(stop: list[str], chunk: int, min_tokens: int = 0) -> tuple[str, list[int]]:
    """Push TEXT's tokens ``chunk`` at a time until a stop string ends the stream; returns (text, tokens)."""
    ids = tokenizer().encode(TEXT)
    stream = TextStream(tokenizer(), stop, min_tokens=min_tokens)
    pieces = []
    for k in range(0, len(ids), chunk):
        pieces.append(stream.push(ids[k : k + chunk]))
        if stream.is_stopped:
            break
    pieces.append(stream.finish())
    return "".join(pieces), stream.token_ids


def completing_token(stop: str, start: int = 1) -> int:
    """Independent expectation: how many of TEXT's tokens it takes for their text to contain ``stop``."""
    ids = tokenizer().encode(TEXT)
    return next(k for k in range(start, len(ids) + 1) if stop in tokenizer().decode(ids[:k]))


@pytest.mark.parametrize("stop", ["lazy", "g. T", "noon"])
def test_tokens_end_at_the_one_completing_the_stop_string_however_they_arrive(stop: str) -> None:
    ids = tokenizer().encode(TEXT)
    k = completing_token(stop)
    for chunk in (1, 3, len(ids)):  # one by one, a few per report, everything in one report
        text, kept = run([stop], chunk)
        assert text == TEXT[: TEXT.index(stop)], chunk
        assert kept == ids[:k], chunk


def test_the_first_stop_string_to_complete_wins_as_in_a_token_by_token_check() -> None:
    # "brown fox" starts first, but "own" is complete a token earlier: a token-by-token check stops there.
    ids = tokenizer().encode(TEXT)
    assert completing_token("own") < completing_token("brown fox")
    for chunk in (1, len(ids)):
        text, kept = run(["brown fox", "own"], chunk)
        assert text == TEXT[: TEXT.index("own")] and kept == ids[: completing_token("own")]


def test_stop_strings_that_end_within_min_tokens_do_not_cut() -> None:
    ids = tokenizer().encode(TEXT)
    late = completing_token("quick") + 2
    for chunk in (1, 3, len(ids)):
        text, kept = run(["quick", "dog"], chunk, min_tokens=late)
        assert text == TEXT[: TEXT.index("dog")] and kept == ids[: completing_token("dog")], chunk


def test_a_stop_token_ends_the_answer_without_its_text_but_is_counted() -> None:
    # vLLM's detokenizer leaves the token that stop-terminated a request out of the text (it stays in the token
    # ids and the usage); the stream used to keep its text (stop_token_ids=[" lazy"] answered "... over the lazy")
    ids = tokenizer().encode(TEXT)
    k = completing_token("lazy")
    stop_id = ids[k - 1]
    assert stop_id not in ids[: k - 1]
    for chunk in (1, 3, len(ids)):
        stream = TextStream(tokenizer(), stop_token_ids=[stop_id])
        pieces = [stream.push(ids[i : i + chunk]) for i in range(0, k, chunk)]
        text = "".join(pieces) + stream.finish()
        assert text == tokenizer().decode(ids[: k - 1]) and stream.token_ids == ids[:k], chunk
    # before min_tokens a stop token is text like any other (the core does not end the request on it)
    stream = TextStream(tokenizer(), min_tokens=k, stop_token_ids=[stop_id])
    text = stream.push(ids[: k + 1]) + stream.finish()
    assert text == tokenizer().decode(ids[: k + 1]) and stream.token_ids == ids[: k + 1]
