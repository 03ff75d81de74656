"""Request bodies of the OpenAI-compatible API, validated by pydantic: every field is honoured or refused.

Unknown fields are refused (``extra="forbid"``), and so are values of another type (``strict``: ``"max_tokens":
true`` or ``3.0``, ``"stream": "yes"``); ``null`` on a field with a default means that default. Fields of the
OpenAI APIs this server does not implement are declared so that their neutral value (``n: 1``, ``echo: false``,
``tools: []``...) is accepted and anything else is refused with a 400 naming the field. ``user``, ``metadata``,
``safety_identifier`` and ``prompt_cache_key`` identify the caller and change no output; they are accepted.
docs/serving.md lists which field is which. Checks that need the served models (vocabulary, context limits) are
in :mod:`trserve.frontend.admission`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

#: Non-negative int64: vLLM reads ``seed=-1`` as "no seed", so negative seeds are refused rather than half-honoured.
SEED_RANGE = (0, (1 << 63) - 1)
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
MAX_LOGIT_BIAS = 300

#: Fields this server does not implement, and the values that mean "not used" (accepted, of the same type: ``echo:
#: 0`` is refused; null always is accepted).
REFUSED_UNLESS: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "response_format": ({"type": "text"},),
    "tools": ([],),
    "tool_choice": ("none",),
    "functions": ([],),
    "function_call": ("none",),
    "parallel_tool_calls": (),
    "audio": (),
    "modalities": (["text"],),
    "prediction": (),
    "reasoning_effort": (),
    "verbosity": (),
    "web_search_options": (),
    "service_tier": (),
    "store": (False,),
}

StopTokenId = Annotated[int, Field(ge=0)]
Bias = Annotated[float, Field(ge=-100.0, le=100.0)]


class StreamOptions(BaseModel):
    """``stream_options``: only ``include_usage`` (a last chunk with the token counts)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False

    @field_validator("include_usage", mode="before")
    @classmethod
    def _null_is_false(cls, value: Any) -> Any:
        """``null`` is the default, as on every field with one (vLLM's ``Optional[bool]`` reads it so too)."""
        return False if value is None else value


class SamplingFields(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's names for what its sampler does per request
    top_k: int | None = Field(None, ge=-1, description="-1 or 0: off")
    min_tokens: int = Field(0, ge=0)
    logit_bias: dict[str, Bias] | None = Field(None, max_length=MAX_LOGIT_BIAS)
    stop_token_ids: list[StopTokenId] | None = Field(None, max_length=MAX_STOP_TOKEN_IDS)
    ignore_eos: bool = False
    # This server's extensions
    routing_extra: dict[str, Any] | None = None
    return_token_ids: bool = False
    #: The model that committed each output token, in the answer (``"yes"``, ``1`` or ``null`` is refused).
    return_provenance: bool = False
    # Accepted, no effect on the output (they identify the caller)
    user: str | None = None
    metadata: dict[str, Any] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # Refused unless neutral (see REFUSED_UNLESS)
    n: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None

    @field_validator(
        "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "best_of", "echo", "suffix",
        "logprobs", "top_logprobs", "response_format", "tools", "tool_choice", "functions", "function_call",
        "parallel_tool_calls", "audio", "modalities", "prediction", "reasoning_effort", "verbosity",
        "web_search_options", "service_tier", "store", check_fields=False,
    )  # fmt: skip
    @classmethod
    def _neutral_or_refused(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or "field"
        if value is not None and not any(value == n and type(value) is type(n) for n in REFUSED_UNLESS[name]):
            raise ValueError(f"not supported by this server (got {value!r}); see docs/serving.md")
        return value

    @field_validator("max_tokens", "temperature", "top_p", "stream", "min_tokens", "ignore_eos", "return_token_ids",
                     mode="before")  # fmt: skip
    @classmethod
    def _null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """``null`` (some clients send every field) means the field's default, as in OpenAI's and vLLM's APIs."""
        return cls.model_fields[info.field_name or ""].default if value is None else value

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(s == "" for s in stops):
            raise ValueError("a stop string must not be empty (it would stop nothing)")
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop string may have at most {MAX_STOP_CHARS} characters")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            digits = key.strip()
            if not (digits.isascii() and digits.isdigit()):  # "²" and "٣" are digits to str.isdigit, not to int()
                raise ValueError(f"keys must be token ids (non-negative integers), got {key!r}")
        return value

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def logit_bias_ids(self) -> dict[int, float]:
        return {int(k): float(v) for k, v in (self.logit_bias or {}).items()}

    def sampling(self) -> dict[str, Any]:
        """What the engines need to sample (temperature 0 = greedy); see ``trserve.engine.core_link``."""
        settings: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        if self.top_k not in (None, -1, 0):
            settings["top_k"] = self.top_k
        if self.logit_bias:
            settings["logit_bias"] = self.logit_bias_ids
        return settings


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: one prompt, as text or token ids (alone or as a list of one, as batching
    clients send it)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    best_of: Any = None
    echo: Any = None
    suffix: Any = None
    logprobs: Any = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[int] | list[str] | list[list[int]]) -> str | list[int]:
        if isinstance(value, list):
            if not value:
                raise ValueError("prompt must not be empty")
            if not isinstance(value[0], int):  # a list of prompts (texts or token id lists)
                if len(value) != 1:
                    raise ValueError("exactly one prompt per request is supported")
                return value[0]
        return value

    @property
    def one_prompt(self) -> str | list[int]:
        """The prompt as text or token ids (the validator took a list of one prompt apart)."""
        return cast("str | list[int]", self.prompt)


class ChatMessage(BaseModel):
    """One chat message: a role and text content (a string or text parts)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]

    @field_validator("content")
    @classmethod
    def _text_parts(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        for part in value if isinstance(value, list) else ():
            if part.get("type") != "text" or not isinstance(part.get("text"), str) or set(part) != {"type", "text"}:
                raise ValueError("only text content parts ({'type': 'text', 'text': ...}) are supported")
        return value

    def text(self) -> str:
        """The content as the chat template gets it: text parts joined by newlines, as vLLM joins them for a
        template that takes string content (joined by nothing, ``["Translate:", "Bonjour"]`` fused the words)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part["text"] for part in self.content)


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: Any = None
    top_logprobs: Any = None
    response_format: Any = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    web_search_options: Any = None
    service_tier: Any = None
    store: Any = None

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
