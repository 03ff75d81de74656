"""Request bodies are strict: a value of another type is refused naming its field, not coerced (``true`` is not
one token, ``"yes"`` does not stream); ``null`` on a field with a default is that default; an empty stop string
is refused rather than ignored; the admin body's thresholds are integers."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from trserve.frontend.admin import ThresholdsBody
from trserve.frontend.api_models import ChatCompletionRequest, CompletionRequest

BASE = {"model": "tokenrouter", "prompt": "hi"}


def parse(**fields: object) -> CompletionRequest:
    return CompletionRequest.model_validate_json(json.dumps({**BASE, **fields}))


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_tokens", True), ("max_tokens", 3.0), ("max_tokens", "3"), ("stream", "yes"), ("stream", 1),
     ("ignore_eos", "true"), ("temperature", "0.5"), ("seed", "7"), ("top_k", 2.0), ("return_token_ids", 1),
     ("return_provenance", "yes"), ("stop", 5), ("stop_token_ids", ["1"])],
)  # fmt: skip
def test_a_value_of_another_type_is_refused_naming_its_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        parse(**{field: value})
    assert caught.value.errors()[0]["loc"][0] == field


def test_json_integers_are_numbers_where_a_number_is_asked() -> None:
    body = parse(temperature=0, top_p=1, max_tokens=3)
    assert (body.temperature, body.top_p, body.max_tokens) == (0.0, 1.0, 3)


@pytest.mark.parametrize(
    ("field", "default"),
    [("temperature", 1.0), ("top_p", 1.0), ("stream", False), ("min_tokens", 0), ("ignore_eos", False),
     ("return_token_ids", False), ("max_tokens", 16), ("seed", None)],
)  # fmt: skip
def test_null_is_the_fields_default(field: str, default: object) -> None:
    assert getattr(parse(**{field: None}), field) == default


def test_null_include_usage_is_its_default() -> None:
    body = parse(stream=True, stream_options={"include_usage": None})
    assert body.stream_options is not None and not body.include_usage
    with pytest.raises(ValidationError):  # another type is still refused
        parse(stream=True, stream_options={"include_usage": "yes"})


@pytest.mark.parametrize("stop", ["", ["ab", ""]])
def test_an_empty_stop_string_is_refused(stop: object) -> None:
    with pytest.raises(ValidationError, match="must not be empty"):
        parse(stop=stop)


def test_chat_messages_are_strict_too() -> None:
    good = {"model": "tokenrouter", "messages": [{"role": "user", "content": "hi"}]}
    assert ChatCompletionRequest.model_validate_json(json.dumps(good)).messages[0].text() == "hi"
    bad = {"model": "tokenrouter", "messages": [{"role": "user", "content": 5}]}
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate_json(json.dumps(bad))


@pytest.mark.parametrize("vector", [[True, 2], ["3", 2], [1.0, 2]])
def test_admin_thresholds_are_integers(vector: list[object]) -> None:
    with pytest.raises(ValidationError):
        ThresholdsBody.model_validate_json(json.dumps({"thresholds": vector}))
    assert ThresholdsBody.model_validate_json('{"thresholds": [3, 2]}').thresholds == [3, 2]
