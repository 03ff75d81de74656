"""``backend: emulated`` with a KV block pool (``emulated.kv_tokens``): the pool refuses overcommit naming the
requests that grow, frees on release, reports kv_usage and kv_budget, prices a recompute as extend, and the core's
KV accounting driving two pooled engines never overcommits them and writes the roomy run's tokens."""

from __future__ import annotations

import pytest

from tests.factories import ScriptedProgram, make_arrival, make_step
from trcore import CLIENT, BatchingPolicy, KVBudget, KVMemory, Subserver, spill_policy
from trserve.engine.emulated import EmulatedEngine, EmulatedLatency
from trserve.engine.types import EngineStepError, StepItem
from trserve.model_config import ModelConfig
from trsim.latency import QuadraticModel

FAST = EmulatedLatency.by_batch_s(1e-6)


def pooled(num_blocks=4, block_size=4, max_seqs=None, latency=FAST):
    return EmulatedEngine(0, latency, pool=KVBudget(num_blocks, block_size, max_seqs))


def test_the_pool_refuses_a_step_that_overcommits_and_reserves_nothing():
    engine = pooled(num_blocks=4, block_size=4)
    engine.step([StepItem("a", [1, 2, 3, 4, 5]), StepItem("b", [1, 2, 3, 4])])  # 2 + 1 blocks
    assert (engine.pool.num_used, engine.kv_usage()) == (3, 0.75)
    with pytest.raises(EngineStepError, match=r"needs 2 KV blocks.*1 of 4 blocks free") as err:
        engine.step([StepItem("a", [6, 7, 8, 9]), StepItem("b", [5])])  # a: 9 tokens -> 3 blocks, b: 5 -> 2
    assert set(err.value.culprits) == {"a", "b"} and "for 9 tokens" in err.value.culprits["a"]
    assert engine.pool.num_used == 3 and len(engine.kv["a"]) == 5  # nothing of the step ran
    engine.step([StepItem("b", [5]), StepItem("a", [6, 7, 8])])  # 5 -> 2 blocks, 8 -> still 2: fits
    assert engine.pool.num_used == 4


def test_release_frees_the_blocks_and_the_sequence_slot():
    engine = pooled(num_blocks=8, block_size=4, max_seqs=2)
    engine.step([StepItem("a", [1] * 8), StepItem("b", [1])])
    with pytest.raises(EngineStepError, match=r"1 new sequence.*2 of 2 sequences held") as err:
        engine.step([StepItem("c", [1])])
    assert list(err.value.culprits) == ["c"]
    engine.release("a")
    assert (engine.pool.num_used, engine.pool.num_seqs) == (1, 1)
    engine.step([StepItem("c", [1, 2, 3])])
    engine.release("unknown")  # ignored, as the Engine protocol says
    assert engine.kv_budget() == KVBudget(8, 4, 2)


def test_without_a_pool_memory_is_free():
    engine = EmulatedEngine(0, FAST)
    engine.step([StepItem("a", list(range(5000)))])
    assert engine.kv_budget() is None and engine.pool is None


def test_a_recompute_is_an_extend_step_priced_by_the_latency_model():
    latency = EmulatedLatency(QuadraticModel(a=1e-4, b=0.0, c=0.0, d=1e-5, e=0.0))
    engine = pooled(num_blocks=4, block_size=4, latency=latency)
    engine.step([StepItem("a", [1, 2, 3, 4, 5])])  # prefill: 4 extend tokens
    assert engine.last_emulated_s == pytest.approx(1e-4 + 4e-5)
    engine.step([StepItem("a", [6])])  # decode
    assert engine.last_emulated_s == pytest.approx(1e-4)
    engine.release("a")  # spilled: its next step feeds the whole sequence
    engine.step([StepItem("a", [1, 2, 3, 4, 5, 6, 7])])
    assert engine.last_emulated_s == pytest.approx(1e-4 + 6e-5) and engine.pool.num_used == 2


def test_the_pool_comes_from_the_model_config():
    cfg = ModelConfig(name="llm", emulated={"latency_ms": 1.0, "kv_tokens": 2304}, block_size=32, max_num_seqs=14)
    engine = EmulatedEngine.from_model_config(1, cfg)
    assert engine.kv_budget() == KVBudget(72, 32, 14) and engine.model == 1
    assert EmulatedEngine.from_model_config(0, ModelConfig(name="slm", emulated={"latency_ms": 1.0})).pool is None


def drive(engines, arrivals, moves, policy):
    """The core driving ``engines`` as the server loop does: free what a batch evicts before its step, release
    finished requests everywhere; returns each request's output."""
    subs = []
    for m, engine in enumerate(engines):
        budget = engine.kv_budget()
        memory = KVMemory(budget, spill_policy(policy)) if budget is not None else None
        scripts = {msg.request_id: list(moves) for msg in arrivals}  # a program consumes its script
        subs.append(Subserver(ScriptedProgram(m, 2, scripts), BatchingPolicy(1), memory=memory))
    for msg in arrivals:
        subs[0].receive(msg, 0.0)
    outputs, now = {}, 0.0
    while len(outputs) < len(arrivals):
        launched = False
        for sub, engine in zip(subs, engines, strict=True):
            batch = sub.launch(now)
            assert not sub.take_unservable()
            if batch is None:
                continue
            launched, now = True, now + 1.0
            for rid in batch.evicted:
                engine.release(rid)
            fed = zip(batch.requests, batch.num_new_tokens, strict=True)
            outs = engine.step([StepItem(r.request_id, r.token_ids[len(r.token_ids) - n :]) for r, n in fed])
            for dest, msg in sub.complete(batch, make_step([o.token_id for o in outs], batch.request_ids), now):
                if dest == CLIENT:
                    outputs[msg.request_id] = msg.token_ids
                    engine.release(msg.request_id)
                else:
                    subs[dest].receive(msg, now)
                    if msg.is_finished:
                        engines[dest].release(msg.request_id)
        assert launched, "deadlock"
    return outputs, subs


@pytest.mark.parametrize("policy", ["cost", "lru", "admission-limit"])
def test_the_core_keeps_two_pooled_engines_within_their_pools(policy):
    moves = [(1, True), (0, True), (1, False), (0, True), (1, True), (0, True)]
    arrivals = [make_arrival(f"r{i}", prompt=(1, 2, 3, i), max_tokens=10) for i in range(4)]
    roomy, _ = drive([EmulatedEngine(m, FAST) for m in (0, 1)], arrivals, moves, policy)
    engines = [EmulatedEngine(m, FAST, pool=KVBudget(5, block_size=4)) for m in (0, 1)]
    tight, subs = drive(engines, arrivals, moves, policy)
    assert tight == roomy
    assert all(e.pool.num_used == 0 and e.kv == {} for e in engines)  # everything released
    if policy != "admission-limit":
        assert sum(s.memory.stats.num_spilled + s.memory.stats.num_preempted for s in subs) > 0
