"""The move rates the ``cost`` spill policy prices with (trcore/move_rates.py): read off a given P, or counted from
traffic by hand-worked sequences of steps, departures, returns and requests that end elsewhere; and a subserver
that feeds them what its sessions do."""

import pytest

from tests.factories import ScriptedProgram, make_arrival, make_step
from trcore import BatchingPolicy, KVBudget, KVMemory, PeerReq, StepCost, Subserver
from trcore.move_rates import LearnedMoveRates, MoveRates
from trcore.spill import CostSpill


def test_given_P_reads_as_leave_and_return_rates():
    rates = MoveRates([[0.9, 0.1], [0.25, 0.75]])
    assert rates.leave_rate(0) == pytest.approx(0.1) and rates.leave_rate(1) == pytest.approx(0.25)
    assert rates.return_rate(1, 0) == 0.25 and rates.return_rate(0, 1) == 0.1
    rates.away(1, 1000, returned=False)  # observations change nothing when P is given
    assert rates.return_rate(1, 0) == 0.25


def test_learned_rates_start_cautious_and_count_what_happens():
    rates = LearnedMoveRates(decay=1.0)
    assert (rates.leave_rate(0), rates.return_rate(1, 0)) == (1.0, 1.0)  # leaves at once, comes straight back
    rates.stepped(9)  # with the prior's one step: 10 request-steps
    for _ in range(4):
        rates.left()  # with the prior's one departure: 5
    assert rates.leave_rate(0) == pytest.approx(5 / 10)
    rates.away(1, 19, returned=True)
    rates.away(1, 0, returned=True)  # back without a kept token elsewhere: one step away
    assert rates.return_rate(1, 0) == pytest.approx(3 / 21)  # prior 1/1, + 19 steps, + 1 step
    rates.away(1, 9, returned=False)  # ended on model 1: 9 steps away, no return
    assert rates.return_rate(1, 0) == pytest.approx(3 / 30)
    assert rates.return_rate(2, 0) == 1.0  # another location keeps its own counts


def test_learned_counts_decay_per_observation():
    rates = LearnedMoveRates(decay=0.5)
    rates.stepped(1)  # steps 1 * 0.5 + 1, departures 1 * 0.5
    assert rates.leave_rate(0) == pytest.approx(0.5 / 1.5)
    rates.away(1, 3, returned=False)  # steps 1 * 0.5 + 3, returns 1 * 0.5
    assert rates.return_rate(1, 0) == pytest.approx(0.5 / 3.5)


def test_a_subserver_feeds_the_rates_from_its_sessions():
    """Model 0 without routing statistics: r0 leaves after its first step and comes back 5 tokens later; r1
    leaves and ends on model 1 at 12 tokens. The policy's learned rates count both absences."""
    policy = CostSpill(StepCost())
    assert isinstance(policy.rates, LearnedMoveRates)
    policy.rates.decay = 1.0
    memory = KVMemory(KVBudget(num_blocks=64, block_size=4), policy)
    program = ScriptedProgram(0, 2, {"r0": [(1, True), (0, True)], "r1": [(1, True)]})
    sub = Subserver(program, BatchingPolicy(threshold=2), memory=memory)
    sub.receive(make_arrival("r0", prompt=(1, 2, 3), max_tokens=20), 0.0)
    sub.receive(make_arrival("r1", prompt=(4, 5, 6), max_tokens=20), 0.0)
    batch = sub.launch(1.0)
    assert batch is not None
    sub.complete(batch, make_step([10, 20], batch.request_ids), 1.0)  # both leave with 4 tokens
    assert policy.rates.leave_rate(0) == pytest.approx((1 + 2) / (1 + 2))
    sub.receive(PeerReq("r0", 4, (11, 12, 13, 14, 15), (4, 9), 1), 2.0)  # back at 9 tokens: 5 away
    sub.receive(PeerReq("r1", 0, (), (4, 12), 1, is_finished=True), 2.0)  # ended on model 1 at 12: 8 away
    assert policy.rates.return_rate(1, 0) == pytest.approx((1 + 1) / (1 + 5 + 8))
