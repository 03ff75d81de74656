"""KV accounting in the subserver on hand-built cases: spills, admission waits, preemption, worst-case
reservation, and whole runs under a tight cache that must write the roomy run's tokens (the budget, ledger and
policies alone: ``test_spill_policy.py``)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import HashModel, ScriptedProgram, make_arrival, make_step, run_system
from trcore import (
    BatchingPolicy,
    KVBudget,
    KVMemory,
    RequestStatus,
    StepCost,
    Subserver,
    spill_policy,
)
from trcore.spill import AdmissionLimit, CostSpill, LRUSpill


def small_model(memory, script=None, num_models=2):
    program = ScriptedProgram(0, num_models, script or {})
    return Subserver(program, BatchingPolicy(threshold=1), memory=memory)


def step(sub, tokens, now):
    batch = sub.launch(now)
    assert batch is not None
    return batch, sub.complete(batch, make_step(tokens, batch.request_ids), now)


def test_parked_session_is_spilled_for_a_running_request_and_recomputed_on_return():
    # 3 blocks of 4 tokens. r0 (prompt 4) steps once, hands off (parks: 1 block); r1 (prompt 7: 2 blocks).
    mem = KVMemory(KVBudget(num_blocks=3, block_size=4), LRUSpill())
    sub = small_model(mem, {"r0": [(1, True)], "r1": [(0, True)] * 3})
    sub.receive(make_arrival("r0", prompt=(1, 2, 3, 4), max_tokens=8), 0.0)
    (_, out) = step(sub, [10], 1.0)
    assert out[0][0] == 1 and sub.requests["r0"].status == RequestStatus.PENDING
    sub.receive(make_arrival("r1", prompt=(1, 2, 3, 4, 5, 6, 7), max_tokens=8), 2.0)
    batch, _ = step(sub, [20], 3.0)  # 7 tokens: 2 blocks, 2 free
    assert batch.evicted == ()
    batch, _ = step(sub, [21], 4.0)  # 8 tokens: still 2 blocks
    batch, _ = step(sub, [22], 5.0)  # 9 tokens: a third block, only r0's is left
    assert batch.evicted == ("r0",) and mem.stats.num_spilled == 1
    assert mem.ledger.blocks_of("r1") == 3 and not mem.ledger.holds("r0")
    sub.abort("r1")
    back = out[0][1]
    from trcore import PeerReq

    sub.receive(PeerReq("r0", 5, (30,), (5, 6), 1), 6.0)  # model 1 wrote token 30 after 10
    batch, _ = step(sub, [11], 7.0)
    assert back.token_ids[-1] == 10
    assert batch.num_new_tokens == (6,)  # the whole sequence, recomputed: 4 prompt + 10 + 30
    assert mem.stats.num_recomputed_tokens == 5  # what model 0 had consumed before the spill


def test_new_request_waits_at_admission_when_spilling_costs_more():
    # r0 parks with 3 blocks and comes straight back (no routing statistics): spilling it to let r1 in would
    # cost its recompute (11 tokens * 0.01 s) for one step's ride (0.001 s / 2). r2, resident and ready, keeps
    # the model busy, so r1 waits.
    mem = KVMemory(KVBudget(num_blocks=5, block_size=4), CostSpill(StepCost(base_s=0.001, extend_s=0.01)))
    sub = small_model(mem, {"r0": [(1, True)], "r2": [(0, True)] * 8})
    sub.receive(make_arrival("r0", prompt=tuple(range(11)), max_tokens=8), 0.0)
    sub.receive(make_arrival("r2", prompt=(1, 2, 3), max_tokens=8), 0.0)
    step(sub, [10, 20], 1.0)  # r0 parks with 3 blocks, r2 holds 1
    sub.receive(make_arrival("r1", prompt=(1, 2, 3, 4, 5, 6), max_tokens=8), 2.0)  # needs 2 blocks, 1 free
    batch, _ = step(sub, [21], 3.0)
    assert batch.request_ids == ["r2"] and batch.evicted == () and mem.stats.num_admission_waits == 1
    assert mem.stats.waiting_now == {"r1"}  # what a front end admitting by KV headroom holds others behind
    batch, _ = step(sub, [22], 4.0)
    assert batch.request_ids == ["r2"] and mem.stats.num_admission_waits == 1  # one request, counted once
    sub.abort("r0")  # finished elsewhere: its blocks come back
    batch = sub.launch(5.0)
    assert batch is not None and batch.request_ids == ["r1", "r2"] and batch.evicted == ()  # all fit: ready order
    assert mem.stats.waiting_now == set() and mem.stats.num_admission_waits == 1


def test_a_new_request_aborted_while_it_waits_for_memory_no_longer_counts_as_waiting():
    mem = KVMemory(KVBudget(num_blocks=5, block_size=4), CostSpill(StepCost(base_s=0.001, extend_s=0.01)))
    sub = small_model(mem, {"r0": [(1, True)], "r2": [(0, True)] * 8})
    sub.receive(make_arrival("r0", prompt=tuple(range(11)), max_tokens=8), 0.0)
    sub.receive(make_arrival("r2", prompt=(1, 2, 3), max_tokens=8), 0.0)
    step(sub, [10, 20], 1.0)
    sub.receive(make_arrival("r1", prompt=(1, 2, 3, 4, 5, 6), max_tokens=8), 2.0)
    step(sub, [21], 3.0)
    assert mem.stats.waiting_now == {"r1"}
    sub.abort("r1")
    assert mem.stats.waiting_now == set() and mem.stats.num_admission_waits == 1


def test_an_idle_model_lets_a_request_in_by_spilling_rather_than_stand_still():
    mem = KVMemory(KVBudget(num_blocks=4, block_size=4), CostSpill())
    sub = small_model(mem, {"r0": [(1, True)]})
    sub.receive(make_arrival("r0", prompt=tuple(range(15)), max_tokens=8), 0.0)
    step(sub, [10], 1.0)  # r0 parks with all 4 blocks
    sub.receive(make_arrival("r1", prompt=(1, 2), max_tokens=8), 2.0)
    batch = sub.launch(3.0)
    assert batch is not None and batch.request_ids == ["r1"] and batch.evicted == ("r0",)


def test_a_request_beyond_reach_waits_and_a_smaller_one_behind_it_spills_its_way_in():
    # 4 blocks of 4 tokens: r0 parks with 2 blocks, r2 runs with 1, 1 is free. "big" needs all 4: even with r0
    # spilled only 3 are free, so it waits without spilling anything; "small", behind it, needs 2 and gets them
    # by spilling r0 (LRU always may).
    mem = KVMemory(KVBudget(num_blocks=4, block_size=4), LRUSpill())
    sub = small_model(mem, {"r0": [(1, True)], "r2": [(0, True)] * 8})
    sub.receive(make_arrival("r0", prompt=tuple(range(7)), max_tokens=8), 0.0)
    sub.receive(make_arrival("r2", prompt=(1, 2, 3), max_tokens=8), 0.0)
    step(sub, [10, 20], 1.0)
    assert mem.ledger.num_free == 1 and mem.ledger.blocks_of("r0") == 2
    sub.receive(make_arrival("big", prompt=tuple(range(13)), max_tokens=3), 2.0)
    sub.receive(make_arrival("small", prompt=tuple(range(6)), max_tokens=3), 2.0)
    batch, _ = step(sub, [21, 30], 3.0)
    assert batch.request_ids == ["r2", "small"] and batch.evicted == ("r0",)
    assert mem.stats.waiting_now == {"big"} and mem.stats.num_admission_waits == 1
    assert not mem.ledger.holds("big") and mem.stats.num_spilled == 1


def test_running_request_preempts_the_newest_waiting_one_when_nothing_is_parked():
    mem = KVMemory(KVBudget(num_blocks=2, block_size=4), CostSpill())
    sub = Subserver(ScriptedProgram(0, 1, {}), BatchingPolicy(threshold=1, max_batch=2), memory=mem)
    sub.receive(make_arrival("a", prompt=(1, 2, 3), max_tokens=8, num_models=1), 0.0)
    sub.receive(make_arrival("b", prompt=(1, 2, 3), max_tokens=8, num_models=1), 0.0)
    batch, _ = step(sub, [5, 6], 1.0)  # 3 tokens each: a block each, the cache is full
    batch, _ = step(sub, [7, 8], 2.0)  # 4 tokens each: still a block each
    assert batch.evicted == ()
    batch, _ = step(sub, [9], 3.0)  # 5 tokens each need 2 blocks: b, the newer, is preempted; a goes on
    assert batch.request_ids == ["a"] and batch.evicted == ("b",) and mem.stats.num_preempted == 1
    batch, _ = step(sub, [10], 4.0)  # b holds nothing now and cannot push a out: it waits
    assert batch.request_ids == ["a"] and batch.evicted == ()
    sub.abort("a")
    batch, _ = step(sub, [1], 5.0)
    assert batch.request_ids == ["b"] and batch.num_new_tokens == (5,)  # recomputed from scratch
    assert mem.stats.num_recomputed_tokens == 4  # what b had consumed before


def test_admission_limit_reserves_the_worst_case_and_never_spills():
    mem = KVMemory(KVBudget(num_blocks=4, block_size=4), AdmissionLimit())
    sub = small_model(mem, {"a": [(1, True)]})
    sub.receive(make_arrival("a", prompt=(1, 2, 3, 4), max_tokens=4), 0.0)  # worst case 8 tokens: 2 blocks
    sub.receive(make_arrival("b", prompt=(1, 2, 3, 4), max_tokens=4), 0.0)
    sub.receive(make_arrival("c", prompt=(1, 2, 3, 4), max_tokens=4), 0.0)
    batch, _ = step(sub, [5, 6], 1.0)
    assert batch.request_ids == ["a", "b"] and mem.ledger.num_free == 0
    batch, _ = step(sub, [7], 2.0)
    assert batch.request_ids == ["b"]  # b grows inside its reservation; c waits; a is parked, never spilled
    assert batch.evicted == () and mem.ledger.holds("a") and sub.requests["c"].status == RequestStatus.WAITING


def test_a_request_larger_than_the_cache_is_handed_back_as_unservable():
    mem = KVMemory(KVBudget(num_blocks=2, block_size=4))
    sub = small_model(mem)
    sub.receive(make_arrival("big", prompt=tuple(range(9)), max_tokens=4), 0.0)
    assert sub.launch(1.0) is None
    assert [r.request_id for r in sub.take_unservable()] == ["big"] and sub.requests == {}


scripts = st.lists(st.tuples(st.integers(0, 1), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(
    script=st.lists(scripts, min_size=4, max_size=4),
    num_blocks=st.integers(4, 10),
    policy=st.sampled_from(["cost", "lru", "admission-limit"]),
)
def test_tight_cache_writes_the_roomy_runs_tokens(script, num_blocks, policy):
    """Whatever spills and preemptions happen, every request writes exactly what it writes with room to spare
    (the fake engine forgets evicted KV, so a wrong recompute is a wrong token), and nothing deadlocks."""

    def run(memories):
        programs = [
            ScriptedProgram(m, 2, {f"r{i}": [(d, k) for d, k in s] for i, s in enumerate(script)}) for m in (0, 1)
        ]
        arrivals = [make_arrival(f"r{i}", prompt=(1, 2, 3, i), max_tokens=10) for i in range(4)]
        return run_system(programs, arrivals, [HashModel(0), HashModel(1)], memories=memories)

    roomy, _ = run(None)
    budgets = [KVBudget(num_blocks, block_size=4) for _ in (0, 1)]
    tight, subs = run([KVMemory(b, spill_policy(policy)) for b in budgets])
    assert tight == roomy
    assert all(sub.memory is not None and sub.memory.ledger.num_used == 0 for sub in subs)  # nothing leaks


def test_a_tight_run_does_spill_and_preempt():
    """The property above is exercised: this fixed case spills and preempts, and still writes the same tokens."""
    moves = [(1, True), (0, True), (1, False), (0, True), (1, True), (0, True)]
    programs = [ScriptedProgram(m, 2, {f"r{i}": list(moves) for i in range(4)}) for m in (0, 1)]
    arrivals = [make_arrival(f"r{i}", prompt=(1, 2, 3, i), max_tokens=10) for i in range(4)]
    roomy, _ = run_system(programs, arrivals, [HashModel(0), HashModel(1)])
    programs = [ScriptedProgram(m, 2, {f"r{i}": list(moves) for i in range(4)}) for m in (0, 1)]
    memories = [KVMemory(KVBudget(5, block_size=4), LRUSpill()) for _ in (0, 1)]
    tight, _ = run_system(programs, arrivals, [HashModel(0), HashModel(1)], memories=memories)
    assert tight == roomy
    stats = [m.stats for m in memories]
    assert sum(s.num_spilled for s in stats) > 0 and sum(s.num_recomputed_tokens for s in stats) > 0


def test_a_queue_waiting_for_memory_sets_no_deadline_until_a_message_arrives():
    """Drivers sleep until next_deadline(); a queue that waits for memory must not make them spin on a deadline
    that has passed: only a message (a release, a return) can free blocks."""
    from trcore import PeerReq

    mem = KVMemory(KVBudget(num_blocks=2, block_size=4), AdmissionLimit())
    program = ScriptedProgram(0, 2, {"a": [(1, True)]})
    sub = Subserver(program, BatchingPolicy(threshold=2, max_wait_s=0.5), memory=mem)
    sub.receive(make_arrival("a", prompt=(1, 2, 3), max_tokens=4), 0.0)  # worst case 7 tokens: both blocks
    batch = sub.launch(0.5)
    sub.complete(batch, make_step([9], batch.request_ids), 0.6)  # a parks here while model 1 continues it
    sub.receive(make_arrival("b", prompt=(1, 2, 3), max_tokens=4), 1.0)
    assert sub.next_deadline() == 1.5
    assert sub.launch(1.5) is None  # b waits at admission: a holds its worst case
    assert sub.next_deadline() is None
    sub.receive(PeerReq("a", 0, (), (4, 5), 1, is_finished=True), 2.0)  # a finished on model 1
    assert sub.next_deadline() == 1.5
    batch = sub.launch(2.0)
    assert batch is not None and batch.request_ids == ["b"]


def test_an_engine_that_frees_after_each_step_parks_nothing():
    """vLLM's readmit hand-off keeps no KV between steps: a request holds blocks only during its own step, so
    two requests that never fit resident together still take turns without a spill."""
    mem = KVMemory(KVBudget(num_blocks=2, block_size=4), CostSpill(), frees_after_step=True)
    sub = small_model(mem, {"a": [(1, True)]})
    sub.receive(make_arrival("a", prompt=(1, 2, 3, 4, 5), max_tokens=4), 0.0)  # 5 tokens: both blocks
    step(sub, [9], 1.0)  # a moves to model 1: parked, but holding nothing
    assert mem.ledger.num_used == 0
    sub.receive(make_arrival("b", prompt=(1, 2, 3, 4, 5), max_tokens=4), 2.0)
    batch, _ = step(sub, [8], 3.0)
    assert batch.request_ids == ["b"] and batch.evicted == () and mem.stats.num_spilled == 0
