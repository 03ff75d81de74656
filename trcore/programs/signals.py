"""Routing signals derived from a step result: entropy, confidence, and per-token feature rows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from trcore.step import StepResult
from trcore.subserver import ProtocolError

#: Log-probability used for top-k slots a backend did not fill (and for a sampled token outside the top-k).
LOG_FLOOR = -30.0

#: Features :func:`confidence_features` computes besides the ``top_k`` sorted log-probabilities.
EXTRA_FEATURES = ("entropy", "tail_mass", "margin", "sampled_logprob", "sampled_is_top1")


def entropy_from_top_logprobs(top: Mapping[int, float]) -> float:
    """Entropy (nats) of a next-token distribution known only by its top-k log-probabilities.

    Approximation: the tail mass ``1 - sum(top-k probabilities)`` is lumped into a single outcome. That is a
    lower bound of the true entropy (spreading the tail over many tokens can only raise it), exact when the
    tail is empty; with vLLM's top-20 the gap is small except on very flat distributions.
    """
    entropy = 0.0
    total = 0.0
    for logprob in top.values():
        p = math.exp(logprob)
        total += p
        if p > 0.0:
            entropy -= p * logprob
    tail = 1.0 - total
    if tail > 1e-12:
        entropy -= tail * math.log(tail)
    return max(entropy, 0.0)


def top_logprobs_of(step: StepResult) -> Sequence[Mapping[int, float]]:
    """The step's top-k log-probabilities, or a ProtocolError naming the missing signal."""
    if step.top_logprobs is None or len(step.top_logprobs) != len(step):
        raise ProtocolError("step result lacks top_logprobs (the routing program requires them)")
    return step.top_logprobs


def step_entropies(step: StepResult) -> list[float]:
    """Per-request entropy: ``StepResult.entropy`` when the backend gives it, else from the top-k."""
    if step.entropy is not None:
        if len(step.entropy) != len(step):
            raise ProtocolError(f"step result has {len(step.entropy)} entropies for {len(step)} tokens")
        return [float(h) for h in step.entropy]
    return [entropy_from_top_logprobs(top) for top in top_logprobs_of(step)]


def top1_probs(step: StepResult) -> list[float]:
    """Per-request probability of the most likely next token."""
    return [math.exp(max(top.values(), default=LOG_FLOOR)) for top in top_logprobs_of(step)]


def confidence_features(top: Mapping[int, float], sampled: int, top_k: int) -> list[float]:
    """One token's feature row: the ``top_k`` largest log-probabilities (descending, padded with
    :data:`LOG_FLOOR`), then entropy, tail mass, top-1 minus top-2 probability, the sampled token's
    log-probability and whether it is the top-1 token (see :data:`EXTRA_FEATURES`).

    Only needs what vLLM returns (top-k logprobs and the sampled token), so serving and training compute
    identical rows.
    """
    ranked = sorted(top.items(), key=lambda item: -item[1])[:top_k]
    logprobs = [max(lp, LOG_FLOOR) for _, lp in ranked]
    logprobs += [LOG_FLOOR] * (top_k - len(logprobs))
    probs = [math.exp(lp) for lp in logprobs]
    # Entropy and tail from the top_k alone: vLLM adds the sampled token when it is outside the top-k, and
    # the row must not depend on that.
    shown = dict(ranked)
    tail = max(0.0, 1.0 - sum(math.exp(lp) for lp in shown.values()))
    margin = probs[0] - probs[1] if top_k > 1 else probs[0]
    sampled_logprob = max(top.get(sampled, LOG_FLOOR), LOG_FLOOR)
    is_top1 = 1.0 if ranked and ranked[0][0] == sampled else 0.0
    return [*logprobs, entropy_from_top_logprobs(shown), tail, margin, sampled_logprob, is_top1]
