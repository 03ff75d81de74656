"""Request edges an OpenAI client can send: refused with a 400 naming the field the request used (never a 500, never
a request that cannot reach the models), and the answer ids vLLM's server gives (``cmpl-``, ``chatcmpl-``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trserve.frontend.admission import Limits, Refused, admit
from trserve.frontend.api_models import ChatCompletionRequest, CompletionRequest

LIMITS = Limits("tokenrouter", vocab_size=1000, max_model_len=2048, eos_token_ids=frozenset({0}), num_models=2)
HI = [{"role": "user", "content": "hi"}]


def completion(**fields: object) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "tokenrouter", "prompt": "hi", **fields})  # as FastAPI does


def chat(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "tokenrouter", "messages": HI, **fields})


@pytest.mark.parametrize("key", ["²", "٣", "-1", "1.5", "x"])
def test_logit_bias_keys_must_be_plain_token_ids(key: str) -> None:
    with pytest.raises(ValidationError) as caught:  # "²".isdigit(), yet int("²") fails: it used to answer 500
        completion(logit_bias={key: 1.0})
    assert caught.value.errors()[0]["loc"][0] == "logit_bias"
    assert completion(logit_bias={" 7 ": 1.0}).logit_bias_ids == {7: 1.0}


@pytest.mark.parametrize("extra", [{"\ud800": 1}, {"a": ["ok", {"b": "\udfff"}]}, {"a": 10**20}, {"a": -(2**63) - 1}])
def test_routing_extra_that_cannot_travel_to_the_models_is_refused(extra: dict[str, object]) -> None:
    # JSON allows a lone surrogate and any integer; msgpack between the processes does not (the send used to fail
    # after the request took its slot: a 500, and the slot never came back)
    with pytest.raises(Refused) as caught:
        admit(LIMITS, completion(routing_extra=extra), [5, 6], 4, chat=False)
    assert caught.value.param == "routing_extra"


def test_chat_context_errors_name_the_fields_the_request_used() -> None:
    for body, param in (
        (chat(max_tokens=5000), "max_tokens"),
        (chat(max_completion_tokens=5000), "max_completion_tokens"),
    ):
        with pytest.raises(Refused) as caught:
            admit(LIMITS, body, [5] * 10, body.output_limit, chat=True)
        assert caught.value.param == param and f"{param} (5000)" in caught.value.message
    with pytest.raises(Refused) as caught:  # a chat request has no "prompt": its messages are too long
        admit(LIMITS, chat(max_tokens=5), [5] * 3000, 5, chat=True)
    assert caught.value.param == "messages"
    with pytest.raises(Refused) as caught:
        admit(LIMITS, chat(max_tokens=5), [5] * 100, 5, chat=True, kv_capacity=50)
    assert caught.value.param == "messages"


def test_answer_ids_are_prefixed_as_vllms() -> None:
    assert admit(LIMITS, completion(), [5, 6], 4, chat=False).request_id.startswith("cmpl-")
    assert admit(LIMITS, chat(), [5, 6], 4, chat=True).request_id.startswith("chatcmpl-")


def test_a_list_of_one_prompt_is_that_prompt() -> None:
    assert completion(prompt=[[5, 6]]).one_prompt == [5, 6]  # the openai client's batch form, of one prompt
    assert completion(prompt=["hi"]).one_prompt == "hi"
    assert completion(prompt=[5, 6]).one_prompt == [5, 6]
    for many in ([[5], [6]], ["a", "b"]):
        with pytest.raises(ValidationError, match="exactly one prompt"):
            completion(prompt=many)


def test_text_parts_are_joined_by_newlines_as_vllm_joins_them() -> None:
    # vLLM (renderers/chat_utils.py) joins a message's text parts with "\n" for a template of string content,
    # as the local pair's; joined by nothing, "Translate:" and "Bonjour" reached the model as "Translate:Bonjour"
    parts = [{"type": "text", "text": "Translate:"}, {"type": "text", "text": "Bonjour"}]
    body = ChatCompletionRequest.model_validate(
        {"model": "tokenrouter", "messages": [{"role": "user", "content": parts}]}
    )
    assert body.messages[0].text() == "Translate:\nBonjour"
    assert chat().messages[0].text() == "hi"  # string content is as sent
