"""OpenAI response shapes for one request, with this server's provenance: ``usage`` counts the output tokens
each model committed (``tokens_per_model``, ``large_model_share``), and with ``return_provenance`` every
choice (or stream chunk) carries the model of each of its output tokens (``provenance``).

Extra fields are allowed by OpenAI's clients (the ``openai`` package keeps them: ``usage.tokens_per_model``,
``choice.provenance``). The large model is the last of the config's ``models``, as in the routing programs
written for a pair (model 0 small, model 1 large).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

#: The ``tokens_per_model`` key of tokens whose model the front end does not know (none in a healthy run).
UNKNOWN = "unknown"

#: Compact JSON, as every chunk is written (strings take the C encoder's fast path).
to_json = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True)
class Provenance:
    """Model indices as the API names them: ``names[m]`` is model ``m``'s config name."""

    names: tuple[str, ...]

    def of(self, models: Sequence[int]) -> list[str | None]:
        """The name of each token's model (None where unknown)."""
        return [self.names[m] if 0 <= m < len(self.names) else None for m in models]

    def counts(self, models: Sequence[int]) -> dict[str, Any]:
        """``tokens_per_model`` (every model, in config order) and ``large_model_share`` (0.0 without tokens)."""
        per_model = dict.fromkeys(self.names, 0)
        for name in self.of(models):
            key = UNKNOWN if name is None else name
            per_model[key] = per_model.get(key, 0) + 1
        large = per_model[self.names[-1]]
        return {"tokens_per_model": per_model, "large_model_share": large / len(models) if models else 0.0}


@dataclass(frozen=True)
class ResponseFormat:
    """OpenAI response shapes for one request. ``models`` arguments are the models of the output tokens the
    response (or chunk) covers, aligned with them (``Generation.models``)."""

    model: str
    request_id: str
    chat: bool
    num_prompt_tokens: int
    provenance: Provenance
    with_provenance: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self, models: Sequence[int]) -> dict[str, Any]:
        """Token counts of the whole answer, with the output tokens per model."""
        total = self.num_prompt_tokens + len(models)
        counts = {"prompt_tokens": self.num_prompt_tokens, "completion_tokens": len(models), "total_tokens": total}
        return {**counts, **self.provenance.counts(models)}

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.request_id, "object": obj, "created": self.created, "model": self.model}

    def _tagged(self, choice: dict[str, Any], models: Sequence[int]) -> dict[str, Any]:
        if self.with_provenance:
            choice["provenance"] = self.provenance.of(models)
        return choice

    def whole(self, text: str, reason: str, models: Sequence[int]) -> dict[str, Any]:
        """A non-streamed answer."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            head = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            head = self._head("text_completion")
        return {**head, "choices": [self._tagged(choice, models)], "usage": self.usage(models)}

    def chunk(
        self, delta: str | None, reason: str | None, models: Sequence[int] = (), role: bool = False
    ) -> dict[str, Any]:
        """A stream chunk adding ``delta`` (``models``: the tokens consumed since the previous chunk)."""
        if self.chat:
            d: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": delta or ""}
            choice = {"index": 0, "delta": d, "finish_reason": reason}
            return {**self._head("chat.completion.chunk"), "choices": [self._tagged(choice, models)]}
        choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": reason}
        return {**self._head("text_completion"), "choices": [self._tagged(choice, models)]}

    def sse_chunk(self, delta: str | None, reason: str | None, models: Sequence[int] = ()) -> bytes:
        """``chunk(delta, reason, models)`` as one server-sent event, ready to write: the parts that never change
        in a stream are encoded once, so a token costs the JSON escaping of its text and little else."""
        before_text, before_reason = self._sse_parts
        tail = f',"provenance":{to_json(self.provenance.of(models))}' if self.with_provenance else ""
        event = f"data: {before_text}{to_json(delta or '')}{before_reason}{to_json(reason)}{tail}}}]}}\n\n"
        return event.encode()

    @cached_property
    def _sse_parts(self) -> tuple[str, str]:
        """What comes before a chunk's text and between its text and its finish reason."""
        if self.chat:
            head = to_json(self._head("chat.completion.chunk"))[:-1]
            return f'{head},"choices":[{{"index":0,"delta":{{"content":', '},"finish_reason":'
        head = to_json(self._head("text_completion"))[:-1]
        return f'{head},"choices":[{{"index":0,"text":', ',"logprobs":null,"finish_reason":'

    def usage_chunk(self, models: Sequence[int]) -> dict[str, Any]:
        """The last chunk of a stream with ``stream_options.include_usage``."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": self.usage(models)}
