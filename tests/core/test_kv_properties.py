"""Properties of the core's KV accounting under random but valid drives of two subservers.

A driver (``World``) sends requests to model 0 (engines that keep KV across steps, or free it after each step as
the ``readmit`` hand-off does), steps either model with drawn routing (stay, move, drop the token), fails steps,
aborts requests and fails those the core hands back as unservable, delivering hand-offs and releases at once;
then it drains the system. After every operation, on every model: used + free blocks
are the capacity and the used ones are the parked sessions' plus the others' (``num_parked_blocks``); nothing is
negative or over ``max_seqs``; a resident request holds ``blocks_for`` of what that model has consumed (its
worst case under ``admission-limit``) or nothing because it was spilled or never stepped there; an ended request
holds nothing anywhere; every live request is ready on exactly one model. Every launch evicts only parked
sessions (counted as spills) and waiting requests outside the step (counted as preemptions, only for a request
under way here, and only once no parked session holds KV), and counts as recomputed exactly the consumed tokens
of the spilled requests it steps again. At the end every request finished or failed with a reason and every
block is free, and the spill, preemption and recompute counters match what the batches did. A small simulation
with a tiny cache does the same through trsim. Under ``admission-limit`` only requests whose worst case exceeds
the cache are ever spilled (two parked on each other's model once waited forever: the regression tests at the end).
"""

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from tests.factories import make_arrival, make_step
from trcore import BatchingPolicy, KVBudget, KVMemory, Routing, RoutingProgram, Subserver
from trcore.request import CLIENT, RequestStatus
from trcore.spill import SPILL_POLICIES, spill_policy

WAITING, RUNNING, PENDING = RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PENDING
POLICIES = sorted(SPILL_POLICIES)


class DrawnProgram(RoutingProgram):
    """Routes each stepped request by the next drawn (destination, kept); stays and keeps once they run out."""

    name = "drawn"

    def __init__(self, model: int) -> None:
        super().__init__(model, 2)
        self.decisions: list[tuple[int, bool]] = []

    def route(self, step):
        moves = [self.decisions.pop(0) if self.decisions else (self.model, True) for _ in step.request_ids]
        return Routing([d for d, _ in moves], [k for _, k in moves])


class World:
    """Two subservers with KV memory and a synchronous driver that checks the core after every call."""

    def __init__(self, policy: str, budget: KVBudget, max_batch: int, readmit: bool = False) -> None:
        self.policy = policy
        batching = BatchingPolicy(threshold=1, max_batch=max_batch)
        self.subs = [
            Subserver(DrawnProgram(m), batching, memory=KVMemory(budget, spill_policy(policy), readmit)) for m in (0, 1)
        ]
        self.specs: dict = {}  # request id -> spec, every request that arrived
        self.ended: dict[str, str] = {}  # request id -> "finished" or why it failed
        self.tallies = [[0, 0, 0], [0, 0, 0]]  # per model: spills, preemptions, recomputed tokens seen in batches
        self.now = 0.0

    @property
    def live(self) -> list[str]:
        return [rid for rid in self.specs if rid not in self.ended]

    def arrive(self, prompt: int, max_tokens: int) -> None:
        msg = make_arrival(f"r{len(self.specs)}", prompt=tuple(range(1, prompt + 1)), max_tokens=max_tokens)
        self.specs[msg.request_id] = msg.spec
        self.subs[0].receive(msg, self.now)

    def end(self, rid: str, reason: str) -> None:
        for sub in self.subs:
            sub.abort(rid)
        self.ended[rid] = reason

    def launch(self, m: int):
        sub, mem = self.subs[m], self.subs[m].memory
        before = {rid: (r.status, mem.ledger.holds(rid)) for rid, r in sub.requests.items()}
        spilled = set(mem.spilled)
        batch = sub.launch(self.now)
        for req in sub.take_unservable():
            assert not mem.ledger.fits_ever(len(req.token_ids)), "a request that fits was called unservable"
            self.end(req.request_id, "unservable")
        if batch is not None:
            seen = check_launch(mem, batch, before, spilled | set(batch.evicted), self.specs)
            self.tallies[m] = [a + b for a, b in zip(self.tallies[m], seen, strict=True)]
            assert counters(mem) == self.tallies[m], "counters disagree with the batches' evictions and recompute"
        return batch

    def run(self, m: int, decisions: list, rounds: int) -> None:
        """Step the models in turn, from model ``m``, ``rounds`` times, routing by ``decisions`` while they last."""
        queue = list(decisions)
        for k in range(rounds):
            self.step((m + k) % 2, queue)
            check_world(self)

    def step(self, m: int, decisions: list) -> bool:
        self.subs[m].program.decisions = decisions
        batch = self.launch(m)
        if batch is None:
            return False
        self.now += 1.0
        tokens = [7 + k for k in range(batch.size)]
        for dest, msg in self.subs[m].complete(batch, make_step(tokens, batch.request_ids), self.now):
            if dest == CLIENT:
                assert len(msg.token_ids) == self.specs[msg.request_id].max_tokens
                self.ended[msg.request_id] = "finished"
            else:
                self.subs[dest].receive(msg, self.now)
        return True

    def fail(self, m: int) -> None:
        batch = self.launch(m)
        if batch is not None:
            for req in self.subs[m].fail(batch):
                self.end(req.request_id, "step failed")

    def abort(self, k: int) -> None:
        if self.live:
            self.end(self.live[k % len(self.live)], "aborted")

    def drain(self) -> None:
        """Step until every request ended: with routing exhausted every request stays and writes to the end."""
        for _ in range(1000):
            live = self.live
            if not live:
                return
            if not any([self.step(0, []), self.step(1, [])]) and live == self.live:
                raise AssertionError(f"deadlock: {self.live} never launch again; {describe(self)}")
            check_world(self)
        raise AssertionError("requests did not finish")


def describe(world: World) -> str:
    held = [{rid: (r.status.name, s.memory.ledger.blocks_of(rid)) for rid, r in s.requests.items()} for s in world.subs]
    return f"(status, blocks) per model: {held}"


def counters(mem) -> list[int]:
    return [mem.stats.num_spilled, mem.stats.num_preempted, mem.stats.num_recomputed_tokens]


def oversized(mem, spec) -> bool:
    """Whether a request's worst case (prompt + max_tokens) is larger than the whole cache."""
    return not mem.ledger.fits_ever(spec.num_prompt_tokens + spec.max_tokens)


def check_launch(mem, batch, before, spilled, specs) -> tuple[int, int, int]:
    """One launch's evictions and recompute (``before``: status and holding per resident); returns their counts."""
    chosen = set(batch.request_ids)
    assert not chosen & set(batch.evicted), f"evicted and stepped at once: {chosen & set(batch.evicted)}"
    assert all(before[rid][1] for rid in batch.evicted), "evicted a request that held no KV"
    parked = [rid for rid in batch.evicted if before[rid][0] is PENDING]
    preempted = [rid for rid in batch.evicted if before[rid][0] is WAITING]
    assert len(parked) + len(preempted) == len(batch.evicted)
    spillable = {rid for rid, (status, _) in before.items() if status is PENDING}  # the parked sessions
    if mem.policy.reserves_worst_case:  # admission-limit: only requests larger than the cache reserve no worst case
        assert all(oversized(mem, specs[rid]) for rid in parked), "admission-limit spilled a reserved session"
        spillable = {rid for rid in spillable if oversized(mem, specs[rid])}
    if preempted:
        assert not any(mem.ledger.holds(r) for r in spillable), "preempted while spillable sessions still hold KV"
    if preempted:
        assert any(before[rid][1] for rid in chosen), "a step of requests without KV here preempted others"
    recomputed = 0
    for req, num_new in zip(batch.requests, batch.num_new_tokens, strict=True):
        again = req.request_id in spilled
        recomputed += req.anchors[batch.model] if again else 0
        assert num_new == len(req.token_ids) - (0 if again else req.anchors[batch.model])
    return len(parked), len(preempted), recomputed


def expected_blocks(mem, req, model: int) -> int:
    """A holder's documented footprint: its consumed tokens in blocks, or its worst case when reserved."""
    budget = mem.ledger.budget
    worst = req.spec.num_prompt_tokens + req.spec.max_tokens
    if mem.policy.reserves_worst_case and mem.ledger.fits_ever(worst):
        return budget.blocks_for(worst)
    return budget.blocks_for(req.anchors[model])


def check_model(world: World, m: int) -> None:
    sub, mem = world.subs[m], world.subs[m].memory
    ledger, budget = mem.ledger, mem.ledger.budget
    assert 0 <= ledger.num_used <= budget.num_blocks and ledger.num_free == budget.num_blocks - ledger.num_used
    held = {rid: ledger.blocks_of(rid) for rid in sub.requests if ledger.holds(rid)}
    assert sum(held.values()) == ledger.num_used and ledger.num_seqs == len(held), "blocks held off the books"
    assert budget.max_seqs is None or ledger.num_seqs <= budget.max_seqs
    parked = sum(n for rid, n in held.items() if sub.requests[rid].status is PENDING)
    active = sum(n for rid, n in held.items() if sub.requests[rid].status is not PENDING)
    assert mem.num_parked_blocks() == parked and active + parked + ledger.num_free == budget.num_blocks
    for rid, req in sub.requests.items():
        assert req.status is not RUNNING and rid not in world.ended
        if rid in held:
            assert held[rid] == expected_blocks(mem, req, m) > 0, f"model {m}: {rid} footprint"
            assert rid not in mem.spilled
        else:
            lost = req.anchors[m] and rid not in mem.spilled and not mem.frees_after_step  # readmit keeps none
            assert not lost, f"model {m}: {rid} lost its KV unrecorded"
    for rid in world.ended:
        assert not ledger.holds(rid) and rid not in mem.spilled and rid not in mem.stats.waiting_now
    assert mem.stats.waiting_now <= {r for r, q in sub.requests.items() if q.status is WAITING and r not in held}
    assert mem.stats.num_admission_waits >= len(mem.stats.waiting_now) >= 0
    assert counters(mem) == world.tallies[m], "counters moved outside a launch"


def check_world(world: World) -> None:
    for m in (0, 1):
        check_model(world, m)
    for rid in world.live:  # nothing lost: ready on one model, parked (or unknown) on the other
        statuses = [s.requests[rid].status for s in world.subs if rid in s.requests]
        assert statuses.count(WAITING) == 1 and len(statuses) - 1 == statuses.count(PENDING), (rid, statuses)


decision = st.tuples(st.integers(0, 1), st.booleans())
arrival = st.tuples(st.just("arrive"), st.integers(1, 10), st.integers(1, 8))
run = st.tuples(st.just("run"), st.integers(0, 1), st.lists(decision, max_size=12), st.integers(1, 10))
other = st.tuples(st.just("fail"), st.integers(0, 1)) | st.tuples(st.just("abort"), st.integers(0, 9))
operations = st.builds(
    lambda first, rest: first + rest,
    st.lists(arrival, min_size=1, max_size=5),
    st.lists(st.one_of(run, run, run, arrival, arrival, other), min_size=4, max_size=30),
)
budgets = st.builds(
    KVBudget, num_blocks=st.integers(2, 10), block_size=st.integers(1, 4), max_seqs=st.none() | st.integers(1, 4)
)
batches = st.integers(1, 3)


def run_operations(world: World, ops) -> None:
    for op, *args in ops:
        getattr(world, op)(*args)
        world.now += 1.0
        check_world(world)
    world.drain()
    check_world(world)
    assert set(world.ended) == set(world.specs)  # nothing lost: finished, or failed with a reason
    assert set(world.ended.values()) <= {"finished", "unservable", "step failed", "aborted"}
    for sub in world.subs:
        mem = sub.memory
        assert sub.requests == {} and mem.ledger.num_used == 0 and mem.ledger.num_seqs == 0
        assert mem.spilled == set() and mem.stats.waiting_now == set()


def worst_case_fits(op, budget: KVBudget) -> bool:
    return op[0] != "arrive" or budget.blocks_for(op[1] + op[2]) <= budget.num_blocks


@settings(max_examples=150, deadline=None)
@given(ops=operations, policy=st.sampled_from(POLICIES), budget=budgets, max_batch=batches, readmit=st.booleans())
def test_random_drives_keep_the_books_and_lose_no_request(ops, policy, budget, max_batch, readmit):
    """Under ``admission-limit``, when every request's worst case fits the cache (reserved before it runs), nothing
    is ever spilled or preempted."""
    world = World(policy, budget, max_batch, readmit)
    run_operations(world, ops)
    evictions = sum(s.memory.stats.num_spilled + s.memory.stats.num_preempted for s in world.subs)
    target(float(evictions), label="evictions")  # steer the search toward memory pressure
    if policy == "admission-limit" and all(worst_case_fits(op, budget) for op in ops):
        assert evictions == 0


def test_admission_limit_oversized_requests_parked_on_each_other_finish():
    """Hypothesis's minimal case: 2 one-token blocks per model, r0 and r1 (prompt 1, max_tokens 2: worst case 3
    tokens) each step on model 0 and move to model 1 dropping the token, r0 steps on 1 and comes back. Each then
    holds 1 block where it runs and needs a 2nd, which the other's parked session holds on that model: one of
    them is spilled (they waited for each other forever)."""
    ops = [("arrive", 1, 2), ("arrive", 1, 2), ("step", 0, [(1, False)]), ("step", 0, [(1, False)])]
    world = World("admission-limit", KVBudget(2, 1), 1)
    run_operations(world, [*ops, ("step", 1, [(0, False)])])
    assert set(world.ended.values()) == {"finished"}
    assert sum(s.memory.stats.num_spilled for s in world.subs) >= 1


def simulate_tiny_cache(seed: int, spill: str, num_blocks: int):
    """Two models, 16 requests of 1-12 prompt and 1-12 output tokens, 4 at a time, caches of 4-token blocks."""
    from trsim import Simulation, WorkloadConfig, markov_config
    from trsim.kv import KVSimConfig
    from trsim.latency import QuadraticModel
    from trsim.lengths import LengthDist

    lengths = LengthDist("uniform", low=1, high=12)
    wl = WorkloadConfig(concurrency=4, prompt_tokens=lengths, output_tokens=lengths, num_sessions=16)
    latency = [QuadraticModel(a=1e-3, b=0.0, c=0.0, d=1e-5, e=0.0), QuadraticModel(a=4e-3, b=0.0, c=0.0, d=4e-5, e=0.0)]
    kv = KVSimConfig((KVBudget(num_blocks, 4), KVBudget(num_blocks, 4)), spill)
    config = markov_config([[0.6, 0.4], [0.7, 0.3]], None, latency, concurrency=4, workload=wl, seed=seed, kv=kv)
    sim = Simulation(config)
    result = sim.run()
    kv = result.extra["kv"]
    assert result.num_unfinished == 0 and result.num_finished + kv["num_failed"] == 16
    assert all(row["peak_used_blocks"] <= row["capacity_blocks"] for row in kv["models"])
    assert all(s.memory.ledger.num_used == 0 and not s.requests for s in sim.subservers)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), spill=st.sampled_from(POLICIES), num_blocks=st.integers(3, 8))
def test_a_tiny_simulated_cache_finishes_every_request_and_frees_every_block(seed, spill, num_blocks):
    simulate_tiny_cache(seed, spill, num_blocks)


@pytest.mark.parametrize(("seed", "num_blocks"), [(1, 3), (4, 4)])  # found by the property above
def test_a_tiny_simulated_cache_under_admission_limit_finishes_oversized_requests(seed, num_blocks):
    """(4, 4): an oversized request preempted a reserved one, which then waited for its KV forever."""
    simulate_tiny_cache(seed=seed, spill="admission-limit", num_blocks=num_blocks)
