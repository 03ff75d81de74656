"""Admission against the KV cache: a request whose prompt + max_tokens cannot fit the smallest cache of the run
could never be stepped, so it is refused before it is queued, naming the field and the limit."""

from __future__ import annotations

import pytest

from trserve.frontend.admission import Limits, Refused, admit
from trserve.frontend.api_models import CompletionRequest

LIMITS = Limits("tokenrouter", vocab_size=1000, max_model_len=2048, eos_token_ids=frozenset({0}), num_models=2)


def body(max_tokens: int) -> CompletionRequest:
    return CompletionRequest(model="tokenrouter", prompt=[5] * 100, max_tokens=max_tokens)


def test_a_request_that_fits_the_smallest_cache_is_admitted():
    spec = admit(LIMITS, body(412), [5] * 100, 412, chat=False, kv_capacity=512)  # 100 + 412 = 512 exactly
    assert spec.max_tokens == 412


def test_a_request_larger_than_the_smallest_cache_is_refused_naming_max_tokens():
    with pytest.raises(Refused) as refused:
        admit(LIMITS, body(413), [5] * 100, 413, chat=False, kv_capacity=512)
    assert refused.value.param == "max_tokens"
    assert "exceeds the KV cache of 512 tokens" in refused.value.message


def test_a_prompt_alone_larger_than_the_cache_is_refused_naming_the_prompt():
    with pytest.raises(Refused) as refused:
        admit(LIMITS, body(1), [5] * 600, 1, chat=False, kv_capacity=512)
    assert refused.value.param == "prompt"


def test_without_a_known_capacity_only_the_context_limit_applies():
    assert admit(LIMITS, body(1948), [5] * 100, 1948, chat=False).max_tokens == 1948


def test_without_max_tokens_the_room_left_is_the_smaller_of_the_context_and_the_cache():
    plain = CompletionRequest(model="tokenrouter", prompt=[5] * 100)
    assert admit(LIMITS, plain, [5] * 100, None, chat=False, kv_capacity=512).max_tokens == 412
    assert admit(LIMITS, plain, [5] * 100, None, chat=False, kv_capacity=100_000).max_tokens == 1948
    with pytest.raises(Refused) as refused:  # a prompt that fills the cache leaves no room at all
        admit(LIMITS, plain, [5] * 512, None, chat=False, kv_capacity=512)
    assert refused.value.param == "prompt"


def test_a_prompt_that_fills_the_cache_without_max_tokens_says_no_room_not_a_max_tokens_never_given():
    plain = CompletionRequest(model="tokenrouter", prompt=[5] * 600)
    with pytest.raises(Refused) as refused:
        admit(LIMITS, plain, [5] * 600, None, chat=True, kv_capacity=512)
    assert refused.value.param == "messages"
    assert "prompt (600 tokens) + no room for output exceeds the KV cache of 512 tokens" in refused.value.message
    assert "max_tokens" not in refused.value.message and "shorten the messages" in refused.value.message
