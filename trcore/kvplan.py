"""One model's memory decisions at launch: which ready requests get their blocks, which sessions are spilled
and which waiting requests are preempted to make room. The subserver asks; the driver frees what it is told.

Order of resort when a request's next step does not fit: spill parked sessions (policy's order); for a request
already under way here, preempt waiting requests of this model, newest first (their KV is recomputed later, as
vLLM does). A request without KV here (new, back after a spill, or on its first visit) spills parked sessions
only when the policy finds it worth their expected recompute, or when nothing else could run: otherwise it waits
(for a new request, at admission), so a cache too small for every active request settles on the ones that fit
instead of spilling sessions that come straight back. A request that cannot fit even in
an empty cache is unservable and handed back to the driver to fail (front ends refuse those at admission).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trcore.memory import KVBudget, KVLedger
from trcore.request import Request
from trcore.spill import CostSpill, ParkedSession, SpillPolicy


@dataclass
class MemoryStats:
    """Counters of one model's memory decisions (cumulative)."""

    num_spilled: int = 0  #: parked sessions whose KV was freed
    num_preempted: int = 0  #: waiting requests whose KV was freed
    num_recomputed_tokens: int = 0  #: context tokens fed again after a spill or preemption
    num_admission_waits: int = 0  #: new requests that waited for memory at least once
    waited: set[str] = field(default_factory=set, repr=False)
    #: New requests waiting for memory now (they got no blocks yet): what a front end admitting by KV headroom
    #: (``server.kv_admission``) holds further requests behind.
    waiting_now: set[str] = field(default_factory=set, repr=False)


@dataclass
class _Launch:
    """What one :meth:`KVMemory.plan` call works on: the queue, the model, the step's size and time, and what it
    has chosen and evicted so far."""

    ready: Sequence[Request]
    residents: dict[str, Request]
    model: int
    size: int
    now: float
    chosen: list[Request] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    #: (len(chosen), len(evicted)) when last computed, and the blocks free plus those the policy would spill.
    room: tuple[tuple[int, int], int] | None = None


class KVMemory:
    """A :class:`KVLedger` with a :class:`SpillPolicy`, and the record of which requests lost their KV here."""

    def __init__(self, budget: KVBudget, policy: SpillPolicy | None = None, frees_after_step: bool = False) -> None:
        #: The engine keeps no KV between a request's steps (vLLM's readmit hand-off: freed after each token, only
        #: prefix-cached): a request holds blocks only during its step, so nothing is ever parked.
        self.frees_after_step = frees_after_step
        self.ledger = KVLedger(budget)
        self.policy = policy or CostSpill()
        self.stats = MemoryStats()
        self.spilled: set[str] = set()
        self._parked: dict[str, tuple[float, int, int]] = {}  # request id -> (since, model continuing it, tokens)
        self._ranked: list[ParkedSession] | None = None  # this plan's parked sessions in spill order

    def num_new_tokens(self, req: Request, model: int) -> int:
        """Tokens the next step of ``req`` feeds: its whole sequence when its KV here was freed."""
        n = len(req.token_ids)
        return n if req.spec.request_id in self.spilled else n - req.anchors[model]

    def park(self, request_id: str, location: int, now: float, num_tokens: int) -> None:
        """The request (``num_tokens`` long) left for ``location`` after its step; its KV here is parked."""
        self._parked[request_id] = (now, location, num_tokens)
        self.policy.observe_departure()

    def after_step(self, request_ids: Iterable[str]) -> None:
        """A step of these requests ended; with ``frees_after_step`` their blocks go back."""
        ids = list(request_ids)
        self.policy.observe_steps(len(ids))
        if self.frees_after_step:
            for rid in ids:
                self.ledger.free(rid)

    def unpark(self, request_id: str, num_tokens: int) -> None:
        """The request came back, now ``num_tokens`` long."""
        self._end_absence(request_id, num_tokens, returned=True)

    def release(self, request_id: str, num_tokens: int | None = None) -> None:
        """The request left this model for good (ended elsewhere at ``num_tokens``, if known)."""
        self.ledger.free(request_id)
        self.spilled.discard(request_id)
        if num_tokens is None:
            self._parked.pop(request_id, None)
        else:
            self._end_absence(request_id, num_tokens, returned=False)
        self.stats.waited.discard(request_id)
        self.stats.waiting_now.discard(request_id)

    def _end_absence(self, request_id: str, num_tokens: int, returned: bool) -> None:
        parked = self._parked.pop(request_id, None)
        if parked is not None:
            _, location, at_park = parked
            self.policy.observe_away(location, num_tokens - at_park, returned)

    def num_parked_blocks(self) -> int:
        return sum(self.ledger.blocks_of(rid) for rid in self._parked)

    def plan(
        self, ready: Sequence[Request], residents: dict[str, Request], model: int, size: int, now: float
    ) -> tuple[list[Request], list[str], list[Request]]:
        """Choose up to ``size`` of ``ready`` whose next step fits, reserving their blocks. When the first ``size``
        fit as they are, they go in order; otherwise the requests that hold KV here come first, then the others
        (as vLLM schedules its running queue before its waiting one).

        Returns (chosen, request ids whose KV the driver must free before the step, unservable requests)."""
        head = list(ready[:size])
        targets = self._fit_as_they_are(head)
        if targets is not None:
            for req, target in zip(head, targets, strict=True):
                self._reserve(req, target, model)
            return head, [], []
        launch = _Launch(ready, residents, model, size, now)
        unservable: list[Request] = []
        self._ranked = None  # parked sessions in spill order, built when first needed
        holders = [r for r in ready if self.ledger.holds(r.spec.request_id)]
        others = [r for r in ready if not self.ledger.holds(r.spec.request_id)]
        for req in (*holders, *others):
            if len(launch.chosen) == size:
                break
            target = self._target_tokens(req)
            if not self.ledger.fits_ever(target):
                unservable.append(req)
            elif self._beyond_reach(req, target, launch):
                self._note_wait(req)
            elif self._make_room(req, target, launch):
                self._reserve(req, target, model)
                launch.chosen.append(req)
        return launch.chosen, launch.evicted, unservable

    def _fit_as_they_are(self, head: Sequence[Request]) -> list[int] | None:
        """The target tokens of ``head`` when all of it fits as things are (no spill, no wait), else None; stops at
        the first request that does not, so a long queue waiting for memory is not walked twice per launch."""
        ledger, budget = self.ledger, self.ledger.budget
        free, extra, num_new, targets = ledger.num_free, 0, 0, []
        for req in head:
            rid, target = req.spec.request_id, self._target_tokens(req)
            extra += ledger.extra_blocks(rid, target)
            if extra > free or not ledger.fits_ever(target):
                return None
            num_new += not ledger.holds(rid)
            targets.append(target)
        if budget.max_seqs is not None and ledger.num_seqs + num_new > budget.max_seqs:
            return None
        return targets

    def _target_tokens(self, req: Request) -> int:
        n = len(req.token_ids)
        if self.policy.reserves_worst_case and not self.ledger.holds(req.spec.request_id):
            worst = req.spec.num_prompt_tokens + req.spec.max_tokens
            return worst if self.ledger.fits_ever(worst) else n
        return n

    def _reserve(self, req: Request, target: int, model: int) -> None:
        rid = req.spec.request_id
        self.stats.waiting_now.discard(rid)
        if rid in self.spilled:  # the subserver clears the mark once it has built the batch
            self.stats.num_recomputed_tokens += req.anchors[model]
        self.ledger.reserve(rid, target)

    def _parked_ranked(self, launch: _Launch) -> list[ParkedSession]:
        if self._ranked is None:
            sessions = [self._session(launch.residents[r], launch) for r in self._parked if self.ledger.holds(r)]
            self._ranked = self.policy.order(sessions, launch.model) if sessions else []
        return [s for s in self._ranked if self.ledger.holds(s.request_id)]

    def _make_room(self, req: Request, target: int, launch: _Launch) -> bool:
        """Make room for ``req`` (see the module docstring); False when it waits."""
        rid = req.spec.request_id
        if self.ledger.can_reserve(rid, target):
            return True
        holds = self.ledger.holds(rid)
        victims = self._cover(rid, target, self._parked_ranked(launch))
        # A request under way here takes what it needs; one without KV here displaces parked sessions only when
        # the policy finds it worth their recompute, or when this model would otherwise stand idle.
        allowed = (
            holds
            or not launch.chosen
            or self.policy.may_admit_by_spilling(victims or [], launch.model, req, launch.size)
        )
        if victims is not None and allowed:
            self._spill([v.request_id for v in victims], launch.evicted, preempted=False)
            return True
        if not holds:
            self._note_wait(req)
            return False  # it waits for room: only a request under way here may preempt others
        return self._preempt(req, target, launch)

    def _beyond_reach(self, req: Request, target: int, launch: _Launch) -> bool:
        """Whether ``req``, holding no KV here, would not fit even if every session the policy ranks were spilled:
        it waits. :meth:`_make_room`'s answer for such a request, in one comparison: the room is summed once per
        state of the launch, so a long queue waiting for memory costs a launch little (admission-limit at N = 128
        keeps ~100 waiting)."""
        blocks = self.ledger.budget.blocks_for(target)
        if self.ledger.holds(req.spec.request_id) or blocks <= self.ledger.num_free:
            return False
        state = (len(launch.chosen), len(launch.evicted))
        if launch.room is None or launch.room[0] != state:
            spillable = sum(s.num_blocks for s in self._parked_ranked(launch))
            launch.room = (state, self.ledger.num_free + spillable)
        return blocks > launch.room[1]

    def _note_wait(self, req: Request) -> None:
        """``req`` holds no KV here and got none: a new request (never spilled, nothing written) waits at admission."""
        rid = req.spec.request_id
        if rid not in self.spilled and req.num_output_tokens == 0:
            self.stats.waiting_now.add(rid)
            if rid not in self.stats.waited:
                self.stats.waited.add(rid)
                self.stats.num_admission_waits += 1

    def _preempt(self, req: Request, target: int, launch: _Launch) -> bool:
        """Free parked sessions and waiting requests not in this step (newest first) until ``req`` fits; False if
        nothing will do."""
        taken = {id(r) for r in launch.chosen}
        waiting = [
            self._session(r, launch)
            for r in reversed(launch.ready)
            if r is not req and id(r) not in taken and self.ledger.holds(r.spec.request_id)
        ]
        waiting = [s for s in waiting if self.policy.may_preempt(s)]
        victims = self._cover(req.spec.request_id, target, [*self._parked_ranked(launch), *waiting])
        if victims is None:
            return False
        num_parked = sum(1 for v in victims if v.request_id in self._parked)
        self._spill([v.request_id for v in victims[:num_parked]], launch.evicted, preempted=False)
        self._spill([v.request_id for v in victims[num_parked:]], launch.evicted, preempted=True)
        return True

    def _cover(self, rid: str, target: int, ranked: Iterable[ParkedSession]) -> list[ParkedSession] | None:
        """The shortest prefix of ``ranked`` whose blocks (and slots) let ``rid`` reach ``target`` tokens."""
        ledger, budget = self.ledger, self.ledger.budget
        need_blocks = ledger.extra_blocks(rid, target) - ledger.num_free
        need_slot = not ledger.holds(rid) and budget.max_seqs is not None and ledger.num_seqs >= budget.max_seqs
        victims: list[ParkedSession] = []
        for session in ranked:
            if need_blocks <= 0 and not need_slot:
                break
            victims.append(session)
            need_blocks -= session.num_blocks
            need_slot = False
        return victims if need_blocks <= 0 and not need_slot else None

    def _spill(self, request_ids: list[str], evicted: list[str], *, preempted: bool) -> None:
        for rid in request_ids:
            self.ledger.free(rid)
            self.spilled.add(rid)
            evicted.append(rid)
            if preempted:
                self.stats.num_preempted += 1
            else:
                self.stats.num_spilled += 1

    def _session(self, req: Request, launch: _Launch) -> ParkedSession:
        rid = req.spec.request_id
        since, location, _ = self._parked.get(rid, (launch.now, launch.model, 0))
        num_blocks = self.ledger.blocks_of(rid)
        worst = self.ledger.budget.blocks_for(req.spec.num_prompt_tokens + req.spec.max_tokens)
        return ParkedSession(
            request_id=rid,
            num_blocks=num_blocks,
            num_tokens=req.anchors[launch.model],
            parked_since=since,
            location=location,
            num_remaining=req.spec.max_tokens - req.num_output_tokens,
            holds_worst_case=num_blocks >= worst,
        )
