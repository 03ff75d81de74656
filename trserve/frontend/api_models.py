"""Request bodies of the OpenAI-compatible API (the subset we serve), validated by pydantic.

Unknown fields are ignored, as OpenAI clients send some we have no use for; fields we cannot honour
(``n`` > 1, ``logprobs``, ``echo``, penalties) are refused with a 400 rather than silently dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class SamplingFields(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=1, description="only n=1 is supported")
    presence_penalty: float = Field(0.0, ge=0.0, le=0.0, description="penalties are not supported")
    frequency_penalty: float = Field(0.0, ge=0.0, le=0.0, description="penalties are not supported")
    # Extensions (vLLM-compatible names where vLLM has them)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    routing_extra: dict[str, Any] | None = None
    return_token_ids: bool = False

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 16:
            raise ValueError("at most 16 stop strings")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def sampling(self) -> dict[str, Any]:
        """What the engines need to sample (temperature 0 = greedy)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: one prompt, as text or token ids."""

    prompt: str | list[int] | list[str]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: None = Field(None, description="logprobs are not supported")
    echo: Literal[False] = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list):
            if not value:
                raise ValueError("prompt must not be empty")
            if all(isinstance(v, str) for v in value) and len(value) != 1:
                raise ValueError("exactly one prompt per request is supported")
        return value


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: Literal[False] | None = None

    @model_validator(mode="after")
    def _text_only(self) -> ChatCompletionRequest:
        for m in self.messages:
            m.text()
        return self

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
