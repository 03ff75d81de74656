"""``backend: hash``: a deterministic stand-in engine for testing the serving machinery without vLLM.

It writes no language: the next token is a hash of (model, everything the request fed this model), so it has a
real per-request cache built only from the suffixes it is fed, exactly like a KV cache. A wrong anchor or a lost
hand-off therefore shows up as different tokens. Routing signals (top-k, entropy) are derived from the same hash.
The hash is chained token by token, so the engine extends a request's digest by what it is fed (constant work
per token, however long the context) and :func:`hash_next` folds a whole sequence to the same digest.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence

from trserve.engine.types import StepItem, TokenOut

#: Tokens are drawn from this range of ids (ordinary text tokens of the SmolLM2 vocabulary).
TOKEN_RANGE = (200, 10_000)


def start_digest(model: int) -> bytes:
    """Model ``model``'s digest of the empty sequence."""
    return hashlib.blake2b(f"tokenrouter-hash-engine:{model}".encode(), digest_size=16).digest()


def extend_digest(digest: bytes, token_ids: Sequence[int]) -> bytes:
    """The digest of a sequence whose digest was ``digest``, with ``token_ids`` appended."""
    for token in token_ids:
        digest = hashlib.blake2b(digest + token.to_bytes(8, "little", signed=True), digest_size=16).digest()
    return digest


def hash_next(model: int, seq: Sequence[int]) -> TokenOut:
    """Model ``model``'s (greedy) next token after the sequence ``seq``, with top-2 logprobs and entropy."""
    return next_from_digest(extend_digest(start_digest(model), seq))


def next_from_digest(digest: bytes) -> TokenOut:
    """The next token (and its signals) of the sequence whose digest is ``digest``."""
    lo, hi = TOKEN_RANGE
    token = lo + int.from_bytes(digest[:4], "little") % (hi - lo)
    runner_up = lo + int.from_bytes(digest[4:8], "little") % (hi - lo)
    p = 0.3 + 0.69 * digest[8] / 255  # top-1 probability in [0.3, 0.99]
    top = {token: math.log(p)}
    if runner_up != token:
        top[runner_up] = math.log(1 - p)
    entropy = -sum(math.exp(lp) * lp for lp in top.values())
    return TokenOut(token, top, entropy, top[token])


class HashEngine:
    """An :class:`~trserve.engine.types.Engine` without a model: ``step_s`` sleeps per step (to give steps a
    duration); ``capacity_tokens`` scales :meth:`kv_usage`."""

    available_signals = frozenset({"token_ids", "top_logprobs", "entropy"})

    def __init__(self, model: int, step_s: float = 0.0, capacity_tokens: int = 1 << 20) -> None:
        self.model = model
        self.step_s = step_s
        self.capacity_tokens = capacity_tokens
        self.kv: dict[str, list[int]] = {}
        self._digests: dict[str, bytes] = {}

    def step(self, items: Sequence[StepItem]) -> list[TokenOut]:
        if self.step_s:
            time.sleep(self.step_s)
        return [self._next(item.request_id, item.new_token_ids) for item in items]

    def _next(self, request_id: str, new_token_ids: Sequence[int]) -> TokenOut:
        """Feed ``new_token_ids`` to the request's cache; its next token."""
        cache = self.kv.setdefault(request_id, [])
        cache.extend(new_token_ids)
        digest = self._digests.get(request_id) or start_digest(self.model)
        digest = self._digests[request_id] = extend_digest(digest, new_token_ids)
        return next_from_digest(digest)

    def release(self, request_id: str) -> None:
        self.kv.pop(request_id, None)
        self._digests.pop(request_id, None)

    def kv_usage(self) -> float:
        return sum(len(c) for c in self.kv.values()) / self.capacity_tokens

    def close(self) -> None:
        self.kv.clear()
        self._digests.clear()
