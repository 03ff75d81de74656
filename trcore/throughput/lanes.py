"""Monte Carlo runs of the throughput model's process: many independent lanes stepped together, one epoch per
array operation.

A lane follows exactly the process the exact chain describes (``trcore.throughput.states``): the same state
``(k, b, r)`` per model, the same integer time units, the same completion epochs and launch rule, with the
routing split drawn instead of enumerated. So a lane's tokens per unit of time converge to the chain's
throughput; nothing is approximated but the finite sample. Each lane has its own threshold vector, so one
array run serves every candidate of a search. Committed tokens are counted by their expectation
(``tokens_per_request_step``), which removes the token draw's variance without changing the long-run mean.
"""

from __future__ import annotations

import numpy as np

from trcore.throughput.spec import ChainSpec
from trcore.throughput.states import IntArray
from trcore.throughput.universe import FloatArray

_NEVER = np.iinfo(np.int64).max


class Lanes:
    """Independent runs of one scenario at ``num_requests``, one per row of ``thresholds`` (lanes x models),
    each starting with every request waiting at model 0."""

    def __init__(self, spec: ChainSpec, num_requests: int, thresholds: IntArray, rng: np.random.Generator) -> None:
        num_models = spec.num_models
        caps = np.asarray(spec.batch_caps(num_requests), dtype=np.int64)
        self._caps = caps[:, None]
        self._rng = rng
        self._threshold = np.minimum(np.asarray(thresholds, dtype=np.int64).T, self._caps)
        self._latency = np.zeros((num_models, int(caps.max()) + 1), dtype=np.int64)
        for i, cap in enumerate(caps):
            self._latency[i, 1 : int(cap) + 1] = [spec.latency(i, s) for s in range(1, int(cap) + 1)]
        self._per_step = np.asarray(spec.tokens_per_request_step, dtype=np.float64)
        self._routes = [_routes(row) for row in spec.P]
        num_lanes = self._threshold.shape[1]
        self._waiting = np.zeros((num_models, num_lanes), dtype=np.int64)
        self._waiting[0] = num_requests
        self._batch = np.zeros_like(self._waiting)
        self._residual = np.zeros_like(self._waiting)
        self._launch()

    @property
    def num_lanes(self) -> int:
        return int(self._threshold.shape[1])

    def run(self, epochs: int) -> tuple[FloatArray, FloatArray]:
        """Advance every lane by ``epochs`` completion epochs; per lane, the expected tokens committed and the
        time units elapsed over them."""
        tokens, time_units = np.zeros(self.num_lanes), np.zeros(self.num_lanes)
        for _ in range(epochs):
            completing, tau = self._complete()
            tokens += self._per_step @ completing
            time_units += tau
            self._route(completing)
            self._launch()
        return tokens, time_units

    def keep(self, lanes: IntArray) -> None:
        """Go on with the listed lanes only, where they are (a lane listed twice continues as two)."""
        for name in ("_threshold", "_waiting", "_batch", "_residual"):
            setattr(self, name, getattr(self, name)[:, lanes])

    def _complete(self) -> tuple[IntArray, IntArray]:
        """The running steps with the least residual finish; the others' residuals drop by that time."""
        running = self._batch > 0
        tau = np.where(running, self._residual, _NEVER).min(axis=0)
        if np.any(tau == _NEVER):
            raise RuntimeError("a lane has no running step: its thresholds deadlock")
        done = running & (self._residual == tau)
        completing = np.where(done, self._batch, 0)
        self._batch -= completing
        self._residual = np.where(self._batch > 0, self._residual - tau, 0)
        return completing, tau

    def _route(self, completing: IntArray) -> None:
        """Each finished request picks its next model by its row of P: a chain of binomials per source."""
        for source, routes in enumerate(self._routes):
            left = completing[source]
            if not left.any():
                continue
            for dest, prob in routes[:-1]:
                moved = self._rng.binomial(left, prob)
                self._waiting[dest] += moved
                left = left - moved
            self._waiting[routes[-1][0]] += left

    def _launch(self) -> None:
        """Every idle model whose queue reached its threshold starts a step with all it may take."""
        ready = (self._batch == 0) & (self._waiting >= self._threshold)
        size = np.where(ready, np.minimum(self._waiting, self._caps), 0)
        self._waiting -= size
        self._batch += size
        started = np.take_along_axis(self._latency, size, axis=1)
        self._residual = np.where(ready, started, self._residual)


def _routes(probs: tuple[float, ...]) -> list[tuple[int, float]]:
    """``(destination, probability given none of the earlier destinations)`` over the positive entries; the
    last destination takes whatever is left."""
    out, rest = [], 1.0
    for dest, p in enumerate(probs):
        if p > 0:
            out.append((dest, min(1.0, p / rest) if rest > 0 else 1.0))
            rest -= p
    return out
