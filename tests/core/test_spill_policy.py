"""KV accounting in the core on hand-built cases, below the subserver: the budget and ledger, and the spill
policies' order and admission decisions."""

import pytest

from tests.factories import make_spec
from trcore import (
    ConfigError,
    KVBudget,
    KVLedger,
    ParkedSession,
    StepCost,
    spill_policy,
)
from trcore.spill import CostSpill, LRUSpill


def test_budget_rounds_tokens_up_to_blocks():
    budget = KVBudget(num_blocks=10, block_size=4)
    assert [budget.blocks_for(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert budget.capacity_tokens == 40
    assert KVBudget.from_tokens(2304, block_size=32).num_blocks == 72
    with pytest.raises(ConfigError, match=r"kv\.num_blocks"):
        KVBudget(num_blocks=0)


def test_ledger_questions_match_actions():
    ledger = KVLedger(KVBudget(num_blocks=4, block_size=4, max_seqs=2))
    assert ledger.can_admit(16) and not ledger.can_admit(17)
    assert ledger.reserve("a", 5) == 2  # 5 tokens -> 2 blocks
    assert ledger.reserve("a", 8) == 0  # still 2 blocks
    assert ledger.reserve("a", 9) == 1
    assert (ledger.num_used, ledger.num_free) == (3, 1)
    assert not ledger.can_reserve("b", 5)
    with pytest.raises(MemoryError, match="request b"):
        ledger.reserve("b", 5)
    ledger.reserve("b", 4)
    assert not ledger.can_admit(1)  # no block and no sequence slot left
    assert ledger.free("a") == 3 and ledger.free("a") == 0
    ledger.reserve("c", 1)
    assert not ledger.can_admit(1)  # blocks free, but max_seqs = 2 sequences hold KV


def session(rid, blocks, tokens, since, location=1, remaining=10):
    return ParkedSession(rid, blocks, tokens, since, location, remaining)


def test_lru_spills_oldest_and_cost_spills_the_cheapest_expected_recompute():
    old, young = session("old", 2, 64, since=1.0), session("young", 2, 64, since=5.0)
    ending = session("ending", 2, 64, since=9.0, remaining=0)  # will end elsewhere: its KV is never needed
    assert [s.request_id for s in LRUSpill().order([young, ending, old], model=0)] == ["old", "young", "ending"]
    ranked = CostSpill().order([young, ending, old], model=0)
    assert [s.request_id for s in ranked] == ["ending", "old", "young"]  # ties broken by age


def test_cost_spills_the_cheapest_recompute_that_covers_a_small_need_not_the_best_ratio():
    # per block the long session is worth less (150 tokens over 10 blocks against 16 over 1), but a step that
    # needs one block would then recompute 150 tokens to free it
    long = session("long", 10, 150, since=1.0)
    short = session("short", 1, 16, since=5.0)
    ranked = CostSpill().order([long, short], model=0)
    assert [s.request_id for s in ranked] == ["short", "long"]


def test_cost_return_probability_from_routing_statistics():
    routing = [[0.9, 0.1], [0.02, 0.98]]  # from model 1 a request moves to model 0 with 2% per step
    policy = CostSpill(routing=routing)
    assert policy.return_probability(session("s", 1, 8, 0.0, location=1, remaining=1), model=0) == pytest.approx(0.02)
    assert policy.return_probability(session("s", 1, 8, 0.0, location=1, remaining=3), model=0) == pytest.approx(
        1 - 0.98**3
    )
    short = session("short", 1, 32, 0.0, location=1, remaining=2)
    long = session("long", 1, 32, 5.0, location=1, remaining=200)
    assert [s.request_id for s in policy.order([long, short], model=0)] == ["short", "long"]


def waiting_request(max_tokens=100):
    from trcore import Request

    return Request(
        spec=make_spec("x", num_prompt_tokens=4, max_tokens=max_tokens), token_ids=[1, 2, 3, 4], anchors=[0, 0]
    )


def test_cost_admission_compares_expected_recompute_with_what_rides_along_while_the_victims_are_away():
    # The victim holds 100 tokens (recompute 100 * 0.01 s = 1 s), is at model 1 and comes back with 1% per step:
    # away 100 steps. The new request, 1000 tokens to write, stays on model 0 for 1 / 0.005 = 200 steps, so it
    # rides along for min(200, 100) steps at base / 4 saved per token.
    routing = [[0.995, 0.005], [0.01, 0.99]]
    victims = [session("v", 4, 100, 0.0, location=1, remaining=1000)]
    long_stay = waiting_request(max_tokens=1000)
    cheap_steps = CostSpill(StepCost(base_s=0.02, per_request_s=0.0, extend_s=0.01), routing)
    assert not cheap_steps.may_admit_by_spilling(victims, 0, long_stay, batch_size=4)  # 0.5 s < 1 s
    dear_steps = CostSpill(StepCost(base_s=0.08, per_request_s=0.0, extend_s=0.01), routing)
    assert dear_steps.may_admit_by_spilling(victims, 0, long_stay, batch_size=4)  # 2 s > 1 s
    # A request that leaves model 0 after 1 / 0.5 = 2 steps on average rides along for 2: 0.04 s < 1 s.
    leaving = CostSpill(StepCost(base_s=0.08, per_request_s=0.0, extend_s=0.01), [[0.5, 0.5], [0.01, 0.99]])
    assert not leaving.may_admit_by_spilling(victims, 0, long_stay, batch_size=4)
    bouncing = CostSpill(StepCost(base_s=0.08, per_request_s=0.0, extend_s=0.01), [[0.995, 0.005], [1.0, 0.0]])
    assert not bouncing.may_admit_by_spilling(victims, 0, long_stay, batch_size=4)  # back next step
    ending = [session("e", 4, 100, 0.0, location=1, remaining=0)]  # ends on model 1: its KV is never needed
    assert bouncing.may_admit_by_spilling(ending, 0, long_stay, batch_size=4)
    assert LRUSpill().may_admit_by_spilling(victims, 0, long_stay, batch_size=1)
    with pytest.raises(ConfigError, match="valid: admission-limit, cost, lru"):
        spill_policy("fifo")


def test_cost_admits_by_spilling_a_request_expected_to_end_here():
    # It rides along for at most 10 steps (0.2 s saved < 1 s of recompute), but with 10 tokens left and 1 / 0.005
    # = 200 steps expected here it most likely ends on model 0, freeing its KV on every model; one expected to
    # leave first (2 steps here on average) waits.
    victims = [session("v", 4, 100, 0.0, location=1, remaining=1000)]
    cost = StepCost(base_s=0.08, per_request_s=0.0, extend_s=0.01)
    assert CostSpill(cost, [[0.995, 0.005], [0.01, 0.99]]).may_admit_by_spilling(
        victims, 0, waiting_request(max_tokens=10), batch_size=4
    )
    assert not CostSpill(cost, [[0.5, 0.5], [0.01, 0.99]]).may_admit_by_spilling(
        victims, 0, waiting_request(max_tokens=10), batch_size=4
    )
    half_written = waiting_request(max_tokens=1000)
    half_written.token_ids.extend([7] * 990)  # what is left counts, not max_tokens
    assert CostSpill(cost, [[0.995, 0.005], [0.01, 0.99]]).may_admit_by_spilling(victims, 0, half_written, 4)
