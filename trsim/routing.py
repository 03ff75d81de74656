"""Synthetic state-dependent routing sources (registered as trcore routing programs) and the builder that
makes one program per model from a router config.

They break the throughput model's assumptions on purpose: ``bursty`` correlates a request's visits over time
(right after a run on the LLM, another is more likely), ``regime`` switches each request between an easy and a
hard routing matrix (a hidden state that travels with the request in ``Request.extra``).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trcore import PROGRAMS, ConfigError, PeerReq, Request, Routing, RoutingProgram, StepResult, register_program
from trcore.routers import validate_keep_matrix, validate_matrix


class _MatrixRouter(RoutingProgram):
    """Shared machinery: sample a destination from a row, keep the token with probability C[model][dest]."""

    def __init__(
        self,
        model: int,
        num_models: int,
        C: Sequence[Sequence[float]] | None,
        rng: random.Random | None,
        seed: int | None,
    ) -> None:
        super().__init__(model, num_models)
        C = C if C is not None else [[1.0] * num_models for _ in range(num_models)]
        validate_keep_matrix(C, num_models)
        self.keep_prob = [float(c) for c in C[model]]
        self.rng = rng if rng is not None else random.Random(seed)
        self._extras: dict[str, dict[str, Any]] = {}

    def _draw(self, row: Sequence[float]) -> tuple[int, bool]:
        u, total, dest = self.rng.random(), 0.0, len(row) - 1
        for j, p in enumerate(row):
            total += p
            if u < total:
                dest = j
                break
        keep = self.keep_prob[dest]
        return dest, keep >= 1.0 or self.rng.random() < keep

    def receive(self, request: Request, peer_req: PeerReq) -> None:
        super().receive(request, peer_req)
        self._extras[request.spec.request_id] = request.extra

    def release(self, request_id: str) -> None:
        self._extras.pop(request_id, None)

    def _state(self, request_id: str) -> dict[str, Any]:
        return self._extras.setdefault(request_id, {})


@register_program("bursty")
class BurstyRouter(_MatrixRouter):
    """Markov routing with matrix ``P``, plus bursts: when a request comes back to this model from a visit to
    model j that began in calm time, a window of ``window`` steps opens during which it goes back to j with
    probability ``burst_p`` per step (other destinations scaled down). Visits made inside a window do not
    extend it. So LLM visits cluster, and run lengths on this model mix two geometric laws instead of one.
    ``C`` as in ``MarkovRouter`` (probability that the token is kept). Per-request state travels in
    ``Request.extra`` (key ``burst<model>``: origin, steps left in the window, left during a burst)."""

    def __init__(
        self,
        model: int,
        num_models: int,
        P: Sequence[Sequence[float]],
        C: Sequence[Sequence[float]] | None = None,
        burst_p: float = 0.5,
        window: int = 8,
        rng: random.Random | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(model, num_models, C, rng, seed)
        validate_matrix("P", P, num_models, stochastic=True)
        if not 0 <= burst_p <= 1 or window < 0:
            raise ConfigError("router.bursty", f"needs 0 <= burst_p <= 1 and window >= 0, got {burst_p}, {window}")
        self.row = [float(p) for p in P[model]]
        self.burst_p, self.window = burst_p, window
        self.key = f"burst{model}"
        self._burst_rows = [self._burst_row(j) for j in range(num_models)]

    def _burst_row(self, origin: int) -> list[float]:
        if origin == self.model or self.burst_p <= self.row[origin]:
            return self.row
        scale = (1.0 - self.burst_p) / max(1.0 - self.row[origin], 1e-12)
        return [self.burst_p if j == origin else p * scale for j, p in enumerate(self.row)]

    def receive(self, request: Request, peer_req: PeerReq) -> None:
        super().receive(request, peer_req)
        if 0 <= peer_req.origin != self.model:
            _, left, left_in_burst = request.extra.get(self.key, (peer_req.origin, 0, False))
            request.extra[self.key] = (peer_req.origin, left if left_in_burst else self.window, False)

    def route(self, step: StepResult) -> Routing:
        dests, keep = [], []
        for rid in step.request_ids:
            state = self._state(rid)
            origin, left, _ = state.get(self.key, (self.model, 0, False))
            dest, kept = self._draw(self._burst_rows[origin] if left > 0 else self.row)
            state[self.key] = (origin, max(left - 1, 0), left > 0 and dest != self.model)
            dests.append(dest)
            keep.append(kept)
        return Routing(dests, keep)


@register_program("regime")
class RegimeRouter(_MatrixRouter):
    """Each request is in an easy or a hard regime (a hidden state carried in ``Request.extra``); it routes
    with ``P_easy`` or ``P_hard`` and flips regime after each step with ``p_to_hard`` / ``p_to_easy``.
    New requests start easy."""

    def __init__(
        self,
        model: int,
        num_models: int,
        P_easy: Sequence[Sequence[float]],
        P_hard: Sequence[Sequence[float]],
        p_to_hard: float = 0.02,
        p_to_easy: float = 0.2,
        C: Sequence[Sequence[float]] | None = None,
        rng: random.Random | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(model, num_models, C, rng, seed)
        validate_matrix("P_easy", P_easy, num_models, stochastic=True)
        validate_matrix("P_hard", P_hard, num_models, stochastic=True)
        if not (0 <= p_to_hard <= 1 and 0 <= p_to_easy <= 1):
            raise ConfigError("router.regime", "p_to_hard and p_to_easy must lie in [0, 1]")
        self.rows = ([float(p) for p in P_easy[model]], [float(p) for p in P_hard[model]])
        self.flip = (p_to_hard, p_to_easy)

    def route(self, step: StepResult) -> Routing:
        dests, keep = [], []
        for rid in step.request_ids:
            state = self._state(rid)
            hard = int(state.get("hard", 0))
            dest, kept = self._draw(self.rows[hard])
            if self.rng.random() < self.flip[hard]:
                state["hard"] = 1 - hard
            dests.append(dest)
            keep.append(kept)
        return Routing(dests, keep)


@dataclass(frozen=True)
class RouterConfig:
    """A routing source: a registered program name and its parameters (the same for every model)."""

    program: str = "markov"
    params: Mapping[str, Any] = field(default_factory=dict)


def build_programs(
    config: RouterConfig, num_models: int, rng: random.Random, models: Sequence[int] | None = None
) -> list[RoutingProgram]:
    """One program instance per model (or per entry of ``models``: a model index per subserver, for replicas).
    Programs taking ``rng`` each get their own, seeded from ``rng``."""
    cls = PROGRAMS.get(config.program)
    takes_rng = "rng" in inspect.signature(cls.__init__).parameters
    programs = []
    for model in range(num_models) if models is None else models:
        params = dict(config.params)
        if takes_rng:
            params["rng"] = random.Random(rng.getrandbits(64))
        try:
            programs.append(PROGRAMS.create(config.program, model, num_models, **params))
        except ConfigError as exc:
            field_name = exc.field if exc.field.startswith("router") else f"router.{exc.field}"
            raise ConfigError(field_name, exc.problem) from None
    return programs
