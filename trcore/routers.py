"""Analysis routers: a stationary Markov router (matrix P) and a trace-replay router."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from trcore.errors import ConfigError
from trcore.program import RoutingProgram, register_program
from trcore.request import PeerReq, Request
from trcore.step import Routing, StepResult

#: ``Request.extra`` key under which trace replay keeps a request's trace index across models.
TRACE_KEY = "trace_index"


def checked_decisions(traces: object, num_models: int) -> list[dict[int, list[tuple[int, bool]]]]:
    """``traces`` as trace replay reads them (``traces[t][m]``: model ``m``'s ``(destination, kept)`` decisions),
    model keys as integers (a config that travelled as JSON has them as strings); anything else is a ConfigError
    naming ``trace.traces`` (a file name is not read here: the simulator's scenario ``router.file`` loads one)."""
    if isinstance(traces, str | bytes) or not isinstance(traces, Sequence) or not traces:
        got = f"{type(traces).__name__} {traces!r}"[:80]
        raise ConfigError("trace.traces", f"needs recorded decisions, a non-empty list of {{model: [[destination, "
                          f"kept], ...]}} per request (trcore.traces.replay_decisions), got {got}")  # fmt: skip
    out = []
    for t, per_model in enumerate(traces):
        try:
            decisions = {int(m): [(int(d), bool(k)) for d, k in steps] for m, steps in dict(per_model).items()}
        except (TypeError, ValueError):
            decisions = {-1: []}
        bad = [d for m, steps in decisions.items() for d, _ in steps if not 0 <= d < num_models] or [
            m for m in decisions if not 0 <= m < num_models
        ]
        if bad:
            raise ConfigError("trace.traces", f"trace {t}: expected {{model: [[destination, kept], ...]}} with "
                              f"models 0..{num_models - 1}, got {str(per_model)[:80]}")  # fmt: skip
        out.append(decisions)
    return out


def validate_matrix(name: str, matrix: Sequence[Sequence[float]], size: int, *, stochastic: bool) -> None:
    """Check a size x size matrix of non-negative entries; rows of a stochastic one sum to 1 (+-1e-9)."""
    if len(matrix) != size or any(len(row) != size for row in matrix):
        raise ConfigError(name, f"must be {size} x {size} (one row and column per model)")
    for i, row in enumerate(matrix):
        if any(not x >= 0 for x in row):
            raise ConfigError(name, f"row {i} has a negative or NaN entry: {list(row)}")
        if stochastic and abs(sum(row) - 1.0) > 1e-9:
            raise ConfigError(name, f"row {i} sums to {sum(row):.12g}, must sum to 1")


def validate_keep_matrix(C: Sequence[Sequence[float]], size: int, name: str = "C") -> None:
    """Check ``C`` as the simulator, the routers and the throughput model all read it: ``C[i][j]`` is the
    chance that the token of a step on ``i`` followed by a move to ``j`` is kept, so it lies in [0, 1]. A value
    above 1 (more than one committed token per step) is refused rather than clamped, by every tool alike."""
    validate_matrix(name, C, size, stochastic=False)
    for i, row in enumerate(C):
        for j, x in enumerate(row):
            if x > 1.0:
                raise ConfigError(
                    name,
                    f"C[{i}][{j}] = {x:g} exceeds 1; C is the chance a step's token is kept (at most one committed "
                    "token per step), so every entry must lie in [0, 1]",
                )


@register_program("markov")
class MarkovRouter(RoutingProgram):
    """After each step on model i, the request goes to model j with probability ``P[i][j]``, independently
    of everything else; the token is kept with probability ``C[i][j]`` (in [0, 1]; C as in the throughput
    model: expected committed tokens of that transition). ``rng`` is a ``random.Random``; pass ``seed``
    instead to make one."""

    def __init__(
        self,
        model: int,
        num_models: int,
        P: Sequence[Sequence[float]],
        C: Sequence[Sequence[float]] | None = None,
        rng: random.Random | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(model, num_models)
        validate_matrix("P", P, num_models, stochastic=True)
        C = C if C is not None else [[1.0] * num_models for _ in range(num_models)]
        validate_keep_matrix(C, num_models)
        self.rng = rng if rng is not None else random.Random(seed)
        row = P[model]
        self._targets = [j for j in range(num_models) if row[j] > 0]
        self._cum = _cumulative([row[j] for j in self._targets])
        self._keep_prob = [float(C[model][j]) for j in range(num_models)]
        self._always_kept = all(self._keep_prob[j] >= 1.0 for j in self._targets)

    def route(self, step: StepResult) -> Routing:
        rand = self.rng.random
        targets, cum = self._targets, self._cum
        if len(targets) == 2:  # the common case, without a call per request (same draws as _pick)
            first, second, cut = targets[0], targets[1], cum[0]
            dests = [first if rand() < cut else second for _ in range(len(step))]
        else:
            dests = [targets[_pick(cum, rand())] for _ in range(len(step))]
        keep_prob = self._keep_prob
        if self._always_kept or all(keep_prob[d] >= 1.0 for d in dests):
            return Routing(dests)
        return Routing(dests, [keep_prob[d] >= 1.0 or rand() < keep_prob[d] for d in dests])


def _cumulative(weights: Sequence[float]) -> list[float]:
    total, out = 0.0, []
    for w in weights:
        total += w
        out.append(total)
    out[-1] = float("inf")  # guards against rounding: the last target always catches
    return out


def _pick(cum: Sequence[float], u: float) -> int:
    k = 0
    while u >= cum[k]:
        k += 1
    return k


@register_program("trace")
class TraceReplayRouter(RoutingProgram):
    """Replays recorded decisions. ``traces[t][m]`` is the list of ``(destination, kept)`` decisions trace
    ``t`` made on model ``m``, in order. The entry model gives each new request the next trace index
    (round robin); the index travels with the request, so every model replays the same trace. A request
    that outlives its trace on a model goes on with the next trace's decisions there (and so on, round robin):
    an independent continuation, where starting its own trace again would repeat one short sample's share of
    hand-offs for the whole request."""

    def __init__(
        self,
        model: int,
        num_models: int,
        traces: Sequence[Mapping[int, Sequence[tuple[int, bool]]]],
    ) -> None:
        super().__init__(model, num_models)
        self.traces = checked_decisions(traces, num_models)
        self._positions: dict[str, tuple[int, int]] = {}  # request -> (trace being replayed here, position)
        self._extras: dict[str, dict[str, object]] = {}
        self._num_assigned = 0

    def route(self, step: StepResult) -> Routing:
        if len(step.request_ids) != len(step):
            raise ConfigError("trace", "trace replay needs StepResult.request_ids")
        dests, keep = [], []
        for rid in step.request_ids:
            dest, kept = self._next(rid)
            dests.append(dest)
            keep.append(kept)
        return Routing(dests, keep)

    def assign(self, extra: dict[str, object]) -> int:
        """Give a request entering here its trace index (kept in ``Request.extra``)."""
        if TRACE_KEY not in extra:
            extra[TRACE_KEY] = self._num_assigned % len(self.traces)
            self._num_assigned += 1
        index = extra[TRACE_KEY]
        if not isinstance(index, int):
            raise ConfigError("trace", f"request trace index must be an integer, got {index!r}")
        return index

    def receive(self, request: Request, peer_req: PeerReq) -> None:
        super().receive(request, peer_req)
        self._extras[request.spec.request_id] = request.extra
        self.assign(request.extra)

    def release(self, request_id: str) -> None:
        self._positions.pop(request_id, None)
        self._extras.pop(request_id, None)

    def _next(self, request_id: str) -> tuple[int, bool]:
        position = self._positions.get(request_id)
        index, pos = position if position is not None else (self.assign(self._extras.setdefault(request_id, {})), 0)
        decisions = self.traces[index].get(self.model)
        for _ in range(len(self.traces)):
            if decisions and pos < len(decisions):
                break
            index, pos = (index + 1) % len(self.traces), 0
            decisions = self.traces[index].get(self.model)
        if not decisions:  # no trace ever stepped on this model
            return self.model, True
        self._positions[request_id] = (index, pos + 1)
        dest, kept = decisions[pos]
        return dest, kept
