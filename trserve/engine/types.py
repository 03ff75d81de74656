"""What every engine and its callers share: the step's input and output, the engine settings, the ``Engine``
protocol (the vLLM step engine, the hash stand-in and any other engine implement it), and the step error.

A leaf module: it imports nothing of the engines themselves, so the loop, the tools and the tests can name these
types without starting or importing vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trcore.errors import ConfigError

#: How a request's tokens reach the engine between steps (see :mod:`trserve.engine.handoff`).
HANDOFF_MODE_NAMES = ("readmit", "session")


@dataclass(frozen=True)
class EngineConfig:
    """One engine's settings. ``block_size`` must be a multiple of 32 on vLLM's CPU backend; ``kv_cache_gib``
    sizes the KV cache exactly (it wins over ``VLLM_CPU_KVCACHE_SPACE``); ``max_num_seqs`` bounds the requests
    *resident* on the engine (running plus parked sessions), not only the batch."""

    model_path: str
    dtype: str = "float32"
    max_model_len: int = 2048
    block_size: int = 32
    kv_cache_gib: float = 1.0
    max_num_seqs: int = 64
    top_logprobs: int = 20
    seed: int = 0
    handoff: str = "session"
    enable_prefix_caching: bool = True
    entropy: bool = True
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    load_format: str = "auto"
    enforce_eager: bool = True
    warmup: bool = True

    def __post_init__(self) -> None:
        if self.handoff not in HANDOFF_MODE_NAMES:
            raise ConfigError("handoff", f"unknown mode {self.handoff!r}; valid: {', '.join(HANDOFF_MODE_NAMES)}")
        for name in ("max_model_len", "block_size", "max_num_seqs", "tensor_parallel_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be at least 1, got {getattr(self, name)}")
        if not self.kv_cache_gib > 0:
            raise ConfigError("kv_cache_gib", f"must be positive, got {self.kv_cache_gib}")
        if not 0 <= self.top_logprobs <= 1000:
            raise ConfigError("top_logprobs", f"must be in 0..1000, got {self.top_logprobs}")


@dataclass(frozen=True)
class StepItem:
    """One request's input to a step: the tokens the engine has not consumed, and its sampling settings
    (``temperature``, ``top_p``, ``top_k``, ``seed``; missing keys mean greedy, no truncation, no seed)."""

    request_id: str
    new_token_ids: Sequence[int]
    sampling: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenOut:
    """One sampled token with its routing signals: top-k raw logprobs, entropy (nats) of the raw
    distribution, and the sampled token's own logprob."""

    token_id: int
    top_logprobs: dict[int, float]
    entropy: float | None
    logprob: float | None = None


class EngineStepError(RuntimeError):
    """A step could not run (context too long, engine full).

    ``culprits`` maps the requests that caused it to their reasons when the engine can tell before running
    anything: then nothing of the step ran and the other requests may be stepped again without them. Empty when
    the whole step failed (its requests were released)."""

    def __init__(self, message: str, culprits: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.culprits: dict[str, str] = dict(culprits or {})


class Engine(Protocol):
    """What a subserver steps: one token for exactly the given requests per call.

    ``step`` appends each item's ``new_token_ids`` to what the engine holds for that request and samples one
    token each, outputs in input order; it raises :class:`EngineStepError` when the step cannot run.
    ``available_signals`` names the routing signals the outputs carry (``token_ids``, ``top_logprobs``,
    ``entropy``)."""

    available_signals: frozenset[str]

    def step(self, items: Sequence[StepItem]) -> list[TokenOut]: ...

    def release(self, request_id: str) -> None:
        """Free what the engine holds for the request; unknown ids are ignored."""
        ...

    def kv_usage(self) -> float:
        """Fraction of the KV cache (or its stand-in) in use."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class OverlappingEngine(Engine, Protocol):
    """An engine whose step runs without the host, as a GPU's does: ``start`` launches a step (raising
    :class:`EngineStepError` as ``step`` does, before anything ran) and returns at once; ``finish`` waits for it and
    returns its outputs. Between the two the subserver loop sends the previous step's report (as vLLM's asynchronous
    output processing does), when ``overlaps`` is true."""

    overlaps: bool

    def start(self, items: Sequence[StepItem]) -> None: ...

    def finish(self) -> list[TokenOut]: ...
