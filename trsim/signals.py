"""Synthetic step results: token ids, plus entropy / top-k logprobs when the routing program reads them.

Entropy follows a per-request AR(1) process in log space (so hard stretches of text cluster in time, as in
real decoding); ``top_logprobs`` are a two-candidate distribution consistent with that entropy. Entropy-driven
programs such as ``rstitch`` and ``colllm`` then run in the simulator unchanged.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trcore import Batch, ConfigError, StepResult

#: The token every synthetic step samples (no workload uses stop tokens, so its value does not matter).
TOKEN_ID = 1
SYNTHESIZED = frozenset({"token_ids", "entropy", "top_logprobs"})


@dataclass(frozen=True)
class SignalConfig:
    """AR(1) log-entropy: ``x' = mean + phi * (x - mean) + sigma * N(0, 1)``, entropy ``exp(x)`` nats."""

    log_entropy_mean: float = -1.5
    phi: float = 0.9
    sigma: float = 0.5

    def __post_init__(self) -> None:
        if not (-1 < self.phi < 1 and self.sigma >= 0):
            raise ConfigError("signals", f"needs -1 < phi < 1 and sigma >= 0, got {self.phi}, {self.sigma}")


class StepSynthesizer:
    """Builds the ``StepResult`` of a simulated step; computes only the signals ``needed``."""

    def __init__(self, needed: frozenset[str], config: SignalConfig, rng: random.Random) -> None:
        missing = needed - SYNTHESIZED
        if missing:
            raise ConfigError("router", f"the simulator cannot synthesize signals {sorted(missing)}")
        self.with_entropy = bool(needed & {"entropy", "top_logprobs"})
        self.config = config
        self.rng = rng
        self._log_entropy: dict[str, float] = {}

    def __call__(self, batch: Batch) -> StepResult:
        request_ids = [r.spec.request_id for r in batch.requests]
        tokens = [TOKEN_ID] * len(request_ids)
        if not self.with_entropy:
            return StepResult(tokens, request_ids=request_ids)
        entropy = [self._next_entropy(rid) for rid in request_ids]
        return StepResult(tokens, top_logprobs=[_top2(h) for h in entropy], entropy=entropy, request_ids=request_ids)

    def release(self, request_id: str) -> None:
        self._log_entropy.pop(request_id, None)

    def _next_entropy(self, request_id: str) -> float:
        cfg = self.config
        x = self._log_entropy.get(request_id, cfg.log_entropy_mean)
        x = cfg.log_entropy_mean + cfg.phi * (x - cfg.log_entropy_mean) + cfg.sigma * self.rng.gauss(0.0, 1.0)
        self._log_entropy[request_id] = x
        return math.exp(x)


def _top2(entropy: float) -> dict[int, float]:
    """Two candidates whose binary entropy is ``entropy`` (capped at ln 2): p solves H(p) = entropy."""
    target = min(entropy, math.log(2) - 1e-9)
    lo, hi = 0.5, 1.0 - 1e-12
    for _ in range(40):  # H is decreasing on [0.5, 1): bisect
        mid = (lo + hi) / 2
        if -(mid * math.log(mid) + (1 - mid) * math.log(1 - mid)) > target:
            lo = mid
        else:
            hi = mid
    p = (lo + hi) / 2
    return {TOKEN_ID: math.log(p), TOKEN_ID + 1: math.log1p(-p)}
