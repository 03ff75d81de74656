"""Admission: every field of a request checked against what every served model can take, before it reaches an
engine. A request that passes cannot make an engine step fail by what it asked for.

The vocabulary is each model's checkpoint ``config.json`` ``vocab_size`` (what vLLM checks token ids against),
the smallest over the models, since a routed request may visit every model; the context limit is likewise the
smallest ``max_model_len``. Field-by-field shapes (types, ranges, sizes) are checked by pydantic in
:mod:`trserve.frontend.api_models`; what needs the models is checked here.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from trcore import RequestSpec
from trcore.program import PROGRAMS, RoutingProgram
from trcore.replicas import PIN_KEY
from trserve.config import ServeConfig
from trserve.frontend.api_models import SamplingFields
from trserve.runtime.messages import INCARNATION, RESUME_MODEL

#: Largest ``routing_extra`` (as compact JSON) and most keys a request may bring; it travels with every hand-off.
MAX_ROUTING_EXTRA_BYTES = 4096
MAX_ROUTING_EXTRA_KEYS = 32
#: The vocabulary assumed when no model has a checkpoint (emulated models): larger than any id the stand-in
#: engines write or the stand-in tokenizer makes.
STAND_IN_VOCAB_SIZE = 1 << 16


class Refused(Exception):
    """A request the server will not serve as asked (HTTP 400 naming ``param``; ``message`` says why)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param, self.message = param, message


@dataclass(frozen=True)
class Limits:
    """What every model of the run can take: the smallest vocabulary and context limit, and the EOS ids."""

    served_model_name: str
    vocab_size: int
    max_model_len: int
    eos_token_ids: frozenset[int]
    num_models: int = 1
    program: type[RoutingProgram] = RoutingProgram

    @classmethod
    def of_run(cls, cfg: ServeConfig, model_paths: Sequence[str], tokenizer: Any) -> Limits:
        """From the run's checkpoints; one without ``vocab_size`` counts as its tokenizer's size, and a run
        without checkpoints (emulated models) as :data:`STAND_IN_VOCAB_SIZE`."""
        hf = getattr(tokenizer, "hf", None)
        fallback = len(hf) if hf is not None else STAND_IN_VOCAB_SIZE
        sizes = [vocab_size_of(p) or fallback for p in model_paths] or [fallback]
        eos = frozenset(tokenizer.eos_token_ids)
        program = PROGRAMS.get(cfg.router.program)
        return cls(cfg.server.served_model_name, min(sizes), cfg.max_model_len, eos, cfg.num_models, program)


def vocab_size_of(model_path: str) -> int | None:
    """``vocab_size`` of a checkpoint's ``config.json`` (or of its ``text_config``), or None."""
    path = Path(model_path) / "config.json"
    if not model_path or not path.is_file():
        return None
    config = json.loads(path.read_text())
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return int(size) if size else None


def admit(
    limits: Limits,
    body: SamplingFields,
    ids: list[int],
    max_tokens: int | None,
    chat: bool,
    kv_capacity: int | None = None,
) -> RequestSpec:
    """The request's spec once every field fits every model; raises :class:`Refused` naming the field.
    ``kv_capacity``: the tokens the smallest KV cache of the run holds (a request must fit it whole)."""
    if body.model != limits.served_model_name:
        raise Refused("model", f"unknown model {body.model!r}; this server serves {limits.served_model_name!r}")
    prompt = "messages" if chat else "prompt"
    if not ids:
        raise Refused(prompt, f"the {prompt} is empty (it tokenizes to no tokens)")
    check_token_ids(prompt, ids, limits.vocab_size)
    # the fields to name when prompt + output do not fit: the ones this request used
    fields = (prompt, "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens")
    asked = max_tokens
    max_tokens = check_context(limits, len(ids), max_tokens, fields)
    if asked is None and kv_capacity is not None and len(ids) < kv_capacity:
        max_tokens = min(max_tokens, kv_capacity - len(ids))  # "the room left": in the context and the KV cache
    check_kv(kv_capacity, len(ids), max_tokens if asked is not None else None, fields)
    check_token_ids("stop_token_ids", body.stop_token_ids or (), limits.vocab_size)
    check_token_ids("logit_bias", list(body.logit_bias_ids), limits.vocab_size)
    if body.top_k is not None and body.top_k > limits.vocab_size:
        raise Refused("top_k", f"top_k ({body.top_k}) exceeds the vocabulary size ({limits.vocab_size})")
    check_extras(body)
    try:
        limits.program.check_extra(body.routing_extra or {}, limits.num_models)
    except ValueError as exc:
        raise Refused("routing_extra", str(exc)) from None
    if body.min_tokens > max_tokens:
        raise Refused("min_tokens", f"min_tokens ({body.min_tokens}) exceeds max_tokens ({max_tokens})")
    stop_ids = set(body.stop_token_ids or ())
    if not body.ignore_eos:
        stop_ids |= limits.eos_token_ids
    return RequestSpec(
        request_id=f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",  # the answer's id, prefixed as vLLM's
        num_prompt_tokens=len(ids),
        max_tokens=max_tokens,
        stop_token_ids=frozenset(stop_ids),
        arrival_time=time.monotonic(),
        sampling=sampling_of(body, len(ids), stop_ids),
        min_tokens=body.min_tokens,
    )


def check_token_ids(param: str, ids: Sequence[int], vocab_size: int) -> None:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise Refused(param, f"token id {bad[0]} is outside the vocabulary of the served models (0..{vocab_size - 1})")


def check_context(limits: Limits, num_prompt: int, max_tokens: int | None, fields: tuple[str, str]) -> int:
    """``max_tokens`` (the room left when not given) once prompt + output fits every model's context; ``fields``:
    the request's names of the prompt and of the output limit (``messages``, ``max_completion_tokens`` in chat)."""
    limit = limits.max_model_len
    if max_tokens is None and num_prompt < limit:
        return limit - num_prompt
    if max_tokens is None or num_prompt + max_tokens > limit:
        asked = "no room for output" if max_tokens is None else f"{fields[1]} ({max_tokens})"
        raise Refused(
            fields[1] if num_prompt < limit else fields[0],
            f"prompt ({num_prompt} tokens) + {asked} exceeds the context limit of {limit} tokens "
            "(the smallest max_model_len of the models a request may visit)",
        )
    return max_tokens


def check_kv(kv_capacity: int | None, num_prompt: int, max_tokens: int | None, fields: tuple[str, str]) -> None:
    """A request whose whole sequence cannot fit the smallest KV cache could never run; refuse it now.
    ``max_tokens`` None: the request gave none, so the room left in the cache is its output."""
    if kv_capacity is None or num_prompt + (1 if max_tokens is None else max_tokens) <= kv_capacity:
        return
    asked = "no room for output" if max_tokens is None else f"{fields[1]} ({max_tokens})"
    lower = f"shorten the {fields[0]}" if max_tokens is None else "lower max_tokens"
    raise Refused(
        fields[1] if max_tokens is not None and num_prompt < kv_capacity else fields[0],
        f"prompt ({num_prompt} tokens) + {asked} exceeds the KV cache of {kv_capacity} tokens (the smallest of "
        f"the models a request may visit); {lower} or give the models more KV cache (kv_cache_gib; "
        "emulated.kv_tokens on emulated engines)",
    )


def check_extras(body: SamplingFields) -> None:
    """Fields whose meaning depends on another field, and the size of ``routing_extra`` (and that it can travel)."""
    if body.return_token_ids and body.stream:
        raise Refused("return_token_ids", "only supported without stream")
    if body.stream_options is not None and not body.stream:
        raise Refused("stream_options", "only allowed with stream: true (as OpenAI's and vLLM's servers answer)")
    extra = body.routing_extra or {}
    for key, what in ((INCARNATION, "crash recovery"), (RESUME_MODEL, "crash recovery"), (PIN_KEY, "replica pins")):
        if key in extra:
            raise Refused("routing_extra", f"routing_extra.{key} is the server's own key ({what})")
    try:
        size = len(json.dumps(extra, separators=(",", ":")))
    except (ValueError, RecursionError):
        size = MAX_ROUTING_EXTRA_BYTES + 1
    if len(extra) > MAX_ROUTING_EXTRA_KEYS or size > MAX_ROUTING_EXTRA_BYTES:
        raise Refused(
            "routing_extra",
            f"routing_extra may hold at most {MAX_ROUTING_EXTRA_KEYS} keys and {MAX_ROUTING_EXTRA_BYTES} bytes "
            f"of JSON (got {len(extra)} keys, {size} bytes)",
        )
    try:  # it travels as msgpack: text must be UTF-8 (no lone surrogate) and integers 64-bit
        msgspec.msgpack.encode(extra)
    except (UnicodeEncodeError, OverflowError) as exc:
        raise Refused("routing_extra", f"routing_extra cannot be sent to the models: {exc}") from None


def sampling_of(body: SamplingFields, num_prompt: int, stop_ids: set[int]) -> dict[str, Any]:
    """The engines' per-request sampling settings; with ``min_tokens`` the stop tokens are suppressed while
    the sequence is shorter than ``suppress_until`` (see ``trserve.engine.core_link.logit_bias_at``)."""
    sampling = body.sampling()
    if body.min_tokens > 0 and stop_ids:
        sampling["suppress_until"] = num_prompt + body.min_tokens
        sampling["suppress_token_ids"] = sorted(stop_ids)
    return sampling
