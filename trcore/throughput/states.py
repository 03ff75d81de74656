"""Chain states and the two halves of one transition: the routing split of the completing batches, then launches.

A state is a row ``(k_0..k_{M-1}, b_0..b_{M-1}, r_0..r_{M-1})``: per model the waiting count, the running batch
size (0 when idle) and the residual time of the running step in time units (0 when idle). States are observed
right after the launches of a completion epoch. Everything here works on arrays of many states at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt

from trcore.errors import ConfigError
from trcore.throughput.spec import ChainSpec

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: ``(arrivals per destination, probability)`` pairs.
Split = list[tuple[tuple[int, ...], float]]


@dataclass(frozen=True)
class Layout:
    """How states of one scenario at concurrency N are laid out and packed into int64 keys."""

    num_models: int
    num_requests: int
    caps: IntArray
    latency_by_size: tuple[IntArray, ...]
    radices: IntArray

    @classmethod
    def of(cls, spec: ChainSpec, num_requests: int) -> Layout:
        caps = np.asarray(spec.batch_caps(num_requests), dtype=np.int64)
        latency = tuple(
            np.asarray([0] + [spec.latency(i, s) for s in range(1, int(cap) + 1)], dtype=np.int64)
            for i, cap in enumerate(caps)
        )
        radices = np.concatenate([np.full(len(caps), num_requests + 1), caps + 1, [t.max() + 1 for t in latency]])
        if sum(math.log2(int(x)) for x in radices) >= 62:
            raise ConfigError(
                "concurrency",
                f"{num_requests} makes states too large to index: use fewer requests or a coarser quantum",
            )
        return cls(len(caps), num_requests, caps, latency, radices.astype(np.int64))

    def encode(self, rows: IntArray) -> IntArray:
        """One int64 per state row (mixed radix), equal exactly for equal states."""
        keys = np.zeros(len(rows), dtype=np.int64)
        for col, radix in enumerate(self.radices):
            keys = keys * radix + rows[:, col]
        return keys

    def encode_batches(self, batches: IntArray) -> IntArray:
        """One int64 per row of per-model batch sizes."""
        keys = np.zeros(len(batches), dtype=np.int64)
        for col, radix in enumerate(self.caps + 1):
            keys = keys * radix + batches[:, col]
        return keys


@dataclass(frozen=True)
class Epochs:
    """The next completion epoch of each state row, before the routing split is drawn."""

    tau: IntArray
    completing: IntArray
    waiting: IntArray
    batches: IntArray
    residuals: IntArray


def next_epochs(rows: IntArray, num_models: int) -> Epochs:
    """The running models with the least residual finish (``completing`` holds their batch sizes) and turn idle;
    the others' residuals drop by that time."""
    m = num_models
    waiting, batches, residuals = rows[:, :m], rows[:, m : 2 * m], rows[:, 2 * m :]
    running = batches > 0
    tau = np.where(running, residuals, np.iinfo(np.int64).max).min(axis=1)
    done = running & (residuals == tau[:, None])
    left = np.where(done, 0, batches)
    return Epochs(tau, np.where(done, batches, 0), waiting, left, np.where(left > 0, residuals - tau[:, None], 0))


def launch(layout: Layout, waiting: IntArray, batches: IntArray, residuals: IntArray, bits: IntArray) -> IntArray:
    """Start a step on every model in each row's bitmask with all its waiting requests, up to its cap."""
    k, b, r = waiting.copy(), batches.copy(), residuals.copy()
    for i in range(layout.num_models):
        go = (bits >> i & 1).astype(bool)
        size = np.minimum(k[go, i], layout.caps[i])
        k[go, i] -= size
        b[go, i] = size
        r[go, i] = layout.latency_by_size[i][size]
    return np.concatenate([k, b, r], axis=1)


def initial_rows(layout: Layout) -> IntArray:
    """All requests waiting at model 0, which launches (any threshold is at most the concurrency)."""
    zeros = np.zeros((1, layout.num_models), dtype=np.int64)
    waiting = zeros.copy()
    waiting[0, 0] = layout.num_requests
    return launch(layout, waiting, zeros, zeros, np.ones(1, dtype=np.int64))


class SplitTable:
    """Distribution of the arrivals a set of completing batches sends to each model, cached per set.

    Every request of a batch on model i picks destination j with probability ``P[i][j]`` independently, so one
    batch splits by a multinomial; several batches convolve. Equal arrival vectors are merged.
    """

    def __init__(self, P: Sequence[Sequence[float]]) -> None:
        self._P = P
        self._cache: dict[tuple[int, ...], tuple[IntArray, FloatArray]] = {}

    def arrivals(self, completing: tuple[int, ...]) -> tuple[IntArray, FloatArray]:
        """``(arrivals matrix, probabilities)`` for batch sizes ``completing`` per model (0: not completing)."""
        split = self._cache.get(completing)
        if split is None:
            dist = self._convolve(completing)
            split = self._cache[completing] = (
                np.asarray([a for a, _ in dist], dtype=np.int64).reshape(-1, len(self._P)),
                np.asarray([p for _, p in dist], dtype=np.float64),
            )
        return split

    def _convolve(self, completing: tuple[int, ...]) -> Split:
        dist: dict[tuple[int, ...], float] = {(0,) * len(self._P): 1.0}
        for model, batch in enumerate(completing):
            if batch == 0:
                continue
            nxt: dict[tuple[int, ...], float] = {}
            for base, p in dist.items():
                for counts, q in multinomial(batch, self._P[model]):
                    key = tuple(x + y for x, y in zip(base, counts, strict=True))
                    nxt[key] = nxt.get(key, 0.0) + p * q
            dist = nxt
        return list(dist.items())


def multinomial(n: int, probs: Sequence[float]) -> Split:
    """Every way ``n`` independent requests fall into destinations with ``probs``, with its probability.

    Destinations of probability zero get no request, so only outcomes of positive probability are listed.
    """
    support = [j for j, p in enumerate(probs) if p > 0]
    slots = n + len(support) - 1
    out: Split = []
    for bars in combinations(range(slots), len(support) - 1):
        counts = [0] * len(probs)
        prob, left = 1.0, n
        for j, lo, hi in zip(support, (-1, *bars), (*bars, slots), strict=True):
            counts[j] = hi - lo - 1
            prob *= math.comb(left, counts[j]) * probs[j] ** counts[j]
            left -= counts[j]
        out.append((tuple(counts), prob))
    return out
