"""Which KV to give up when a step needs blocks: spill policies over a model's parked sessions.

A *parked session* holds KV on this model while another model continues its request. Spilling it frees its
blocks; if it comes back, its context is recomputed (one extend step). Three policies, by name:

* ``cost`` (default): spill the sessions that are cheapest to lose first, the expected cost of a spill = chance
  of returning before the request ends x the time to recompute its context; a step that needs a few blocks
  spills as little recompute as covers them (ranking by value per block instead spilled a long session whose
  last block was barely used to free the one block a step needed). A request without KV here may spill sessions
  to get in only when that expected recompute costs less than what running it saves while they are away (its
  tokens ride along in steps that run anyway, for as many steps as both it stays here and the victims stay on the
  other model); otherwise it waits (a new one at admission). A request expected to end here (its remaining tokens
  at most the steps it is expected to stay) always may: when it ends it frees its KV on every model, while waiting
  would keep holding what it has parked elsewhere. Sessions that bounce back within a step or two, or requests
  that leave again after one, are never worth a spill. The rates come from the routing statistics' P
  when the router has one, else they are learned from the model's own traffic (:mod:`trcore.move_rates`).
* ``lru``: spill the session parked longest ago; new requests always get in.
* ``admission-limit``: never spill; a request is admitted on a model only once its whole worst-case footprint
  (prompt + max_tokens) is reserved there, so running requests never run out. A request whose worst case exceeds
  the whole cache reserves only what it holds (it could never be admitted otherwise); it may then preempt and be
  preempted by another such request, its parked sessions are spilled (oldest first) when a step needs their blocks
  (two such requests parked on each other's model would otherwise wait for each other forever), and it fails only
  if it outgrows the cache. What holds a worst case is never taken: each request keeps its KV on every model it
  entered, so it always runs again where it is, and no set of requests waits on each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trcore.errors import ConfigError
from trcore.move_rates import LearnedMoveRates, MoveRates
from trcore.request import Request


@dataclass(frozen=True)
class ParkedSession:
    """A session that could be spilled: what it holds and what is known of its future."""

    request_id: str
    num_blocks: int
    num_tokens: int  #: context whose KV it holds
    parked_since: float
    location: int  #: the model continuing it now
    num_remaining: int  #: output tokens it may still write
    holds_worst_case: bool = False  #: its blocks cover its worst case (prompt + max_tokens): admission-limit's


@dataclass(frozen=True)
class StepCost:
    """A linear step-time model for pricing spills: ``base_s + per_request_s * batch + extend_s * extend tokens``
    (the profile's terms). The defaults, for when no profile is known, are relative units: a step's fixed cost
    equals 200 tokens of extend, roughly a decode step against prefill on GPUs and on the CPU pair."""

    base_s: float = 1.0
    per_request_s: float = 0.0
    extend_s: float = 0.005

    def __post_init__(self) -> None:
        if not all(math.isfinite(x) and x >= 0 for x in (self.base_s, self.per_request_s, self.extend_s)):
            raise ConfigError("memory.step_cost", f"terms must be finite and >= 0, got {self}")

    def recompute_s(self, num_tokens: int) -> float:
        return self.extend_s * num_tokens

    def saving_per_token_s(self, batch_size: int) -> float:
        """What one token costs alone in a step of ``batch_size`` minus its marginal cost in that step."""
        b = max(1, batch_size)
        return max(0.0, (self.base_s + self.per_request_s * b) / b - self.per_request_s)


class SpillPolicy:
    """Base policy: ``order`` ranks sessions most expendable first; ``may_admit_by_spilling`` decides whether a
    new request may push sessions out to get in."""

    name = ""
    reserves_worst_case = False

    def order(self, sessions: Sequence[ParkedSession], model: int) -> list[ParkedSession]:
        return sorted(sessions, key=lambda s: s.parked_since)

    def may_preempt(self, session: ParkedSession) -> bool:
        """Whether a waiting request's KV (``session``) may be taken for a request under way that needs room."""
        return True

    def may_admit_by_spilling(
        self, victims: Sequence[ParkedSession], model: int, request: Request, batch_size: int
    ) -> bool:
        """Whether ``request``, which holds no KV here, may spill ``victims`` to step in a batch of ``batch_size``."""
        return True

    def observe_steps(self, num_steps: int) -> None:
        """``num_steps`` request-steps ran here (policies that learn move rates count them)."""

    def observe_departure(self) -> None:
        """A request left this model after its step."""

    def observe_away(self, location: int, num_steps: int, returned: bool) -> None:
        """A session parked here was away ``num_steps`` steps on ``location``, and came back or ended there."""


class LRUSpill(SpillPolicy):
    """Spill the session parked longest ago."""

    name = "lru"


class AdmissionLimit(SpillPolicy):
    """Reserve each request's worst case on arrival and never spill what is reserved; only the sessions of requests
    larger than the cache (which reserve what they hold) are spilled, oldest first."""

    name = "admission-limit"
    reserves_worst_case = True

    def order(self, sessions: Sequence[ParkedSession], model: int) -> list[ParkedSession]:
        return super().order([s for s in sessions if not s.holds_worst_case], model)

    def may_preempt(self, session: ParkedSession) -> bool:
        return not session.holds_worst_case


class CostSpill(SpillPolicy):
    """Spill the cheapest expected recompute first (see the module docstring).

    ``routing[i][j]`` is the per-step chance a request on model ``i`` moves to ``j`` (the routing statistics'
    P); without it the rates are learned (:class:`~trcore.move_rates.LearnedMoveRates`)."""

    name = "cost"

    def __init__(self, cost: StepCost | None = None, routing: Sequence[Sequence[float]] | None = None) -> None:
        self.cost = cost or StepCost()
        self.rates = MoveRates(routing) if routing is not None else LearnedMoveRates()

    def observe_steps(self, num_steps: int) -> None:
        self.rates.stepped(num_steps)

    def observe_departure(self) -> None:
        self.rates.left()

    def observe_away(self, location: int, num_steps: int, returned: bool) -> None:
        self.rates.away(location, num_steps, returned)

    def return_probability(self, session: ParkedSession, model: int) -> float:
        """Chance the session comes back to ``model`` before its request ends."""
        if session.num_remaining <= 0:
            return 0.0
        if session.location == model:
            return 1.0
        move = self.rates.return_rate(session.location, model)
        return 1.0 - (1.0 - move) ** session.num_remaining

    def expected_recompute_s(self, session: ParkedSession, model: int) -> float:
        return self.return_probability(session, model) * self.cost.recompute_s(session.num_tokens)

    def order(self, sessions: Sequence[ParkedSession], model: int) -> list[ParkedSession]:
        def expected_loss(s: ParkedSession) -> tuple[float, float]:
            return (self.expected_recompute_s(s, model), s.parked_since)

        return sorted(sessions, key=expected_loss)

    def expected_away_steps(self, session: ParkedSession, model: int) -> float:
        """Steps the session is expected to stay away (at most its remaining tokens)."""
        return _expected_steps(self.rates.return_rate(session.location, model), session.num_remaining)

    def expected_stay_steps(self, request: Request, model: int) -> float:
        """Steps ``request`` is expected to run here before it leaves or ends."""
        return _expected_steps(self.rates.leave_rate(model), request.spec.max_tokens - request.num_output_tokens)

    def may_admit_by_spilling(
        self, victims: Sequence[ParkedSession], model: int, request: Request, batch_size: int
    ) -> bool:
        if not victims:
            return False
        stay = self.expected_stay_steps(request, model)
        if stay >= request.spec.max_tokens - request.num_output_tokens:
            return True  # it ends here and frees its KV everywhere; waiting would hold what it parked elsewhere
        loss = sum(self.expected_recompute_s(v, model) for v in victims)
        away = min(self.expected_away_steps(v, model) for v in victims)
        ride = min(stay, away)
        return loss <= ride * self.cost.saving_per_token_s(batch_size)


def _expected_steps(rate: float, num_remaining: int) -> float:
    """Steps until an event of per-step chance ``rate``, at most ``num_remaining``."""
    return float(num_remaining) if rate <= 0 else min(float(num_remaining), 1.0 / rate)


SPILL_POLICIES: dict[str, type[SpillPolicy]] = {p.name: p for p in (CostSpill, LRUSpill, AdmissionLimit)}


def spill_policy(
    name: str,
    cost: StepCost | None = None,
    routing: Sequence[Sequence[float]] | None = None,
    field: str = "memory.spill",
) -> SpillPolicy:
    """The policy called ``name`` (``cost`` and ``routing`` price the ``cost`` policy's spills; the simple ones
    need neither); unknown names are a ConfigError on ``field`` listing the valid ones."""
    if name == CostSpill.name:
        return CostSpill(cost, routing)
    if name in SPILL_POLICIES:
        return SPILL_POLICIES[name]()
    raise ConfigError(field, f"unknown spill policy {name!r}; valid: {', '.join(sorted(SPILL_POLICIES))}")
