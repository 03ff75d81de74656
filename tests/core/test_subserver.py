"""The subserver state machine driven by hand-built step results."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.factories import ScriptedProgram, make_arrival, make_step, make_subserver
from trcore import CLIENT, PeerReq, ProgramError, ProtocolError, RequestStatus, is_feasible


def step_all(sub, tokens, now=1.0):
    batch = sub.launch(now)
    assert batch is not None
    return batch, sub.complete(batch, make_step(tokens, batch.request_ids), now)


def test_single_model_runs_to_max_tokens_and_reports_output():
    sub = make_subserver(num_models=1)
    sub.receive(make_arrival(max_tokens=3, num_models=1), now=0.0)
    batch, out = step_all(sub, [7])
    assert batch.num_new_tokens == (3,)  # the prompt is prefilled on the first step
    assert out == []
    _, out = step_all(sub, [8], now=2.0)
    batch, out = step_all(sub, [9], now=3.0)
    assert batch.num_new_tokens == (1,)
    assert [(dest, msg.token_ids, msg.is_finished) for dest, msg in out] == [(CLIENT, (7, 8, 9), True)]
    assert sub.requests == {}


def test_stop_token_finishes_early():
    sub = make_subserver(num_models=1)
    sub.receive(make_arrival(max_tokens=10, num_models=1, stop_token_ids=frozenset({0})), now=0.0)
    step_all(sub, [5])
    _, out = step_all(sub, [0])
    assert out[0][0] == CLIENT and out[0][1].token_ids == (5, 0)


def test_handoff_sends_only_unseen_tokens_and_anchors_advance():
    a = make_subserver(0, program=ScriptedProgram(0, 2, {"r0": [(0, True), (1, True)]}))
    b = make_subserver(1, program=ScriptedProgram(1, 2, {"r0": [(0, True)]}))
    a.receive(make_arrival(max_tokens=10), 0.0)
    step_all(a, [10])
    _, out = step_all(a, [11])
    ((dest, msg),) = out
    assert dest == 1 and msg.start == 0 and msg.token_ids == (1, 2, 3, 10, 11) and msg.spec is not None
    assert a.requests["r0"].status == RequestStatus.PENDING
    b.receive(msg, 2.0)
    batch, out = step_all(b, [12])
    assert batch.num_new_tokens == (5,)
    ((dest, msg),) = out
    assert dest == 0 and msg.start == 4 and msg.token_ids == (11, 12) and msg.spec is None
    assert msg.anchors == (4, 5)
    a.receive(msg, 3.0)
    batch, _ = step_all(a, [13])
    assert batch.num_new_tokens == (2,)  # its own last token and the peer's token
    assert a.requests["r0"].output_token_ids == [10, 11, 12, 13]


def test_dropped_token_is_not_committed_and_peer_regenerates_it():
    a = make_subserver(0, program=ScriptedProgram(0, 2, {"r0": [(1, False)]}))
    a.receive(make_arrival(max_tokens=10), 0.0)
    _, out = step_all(a, [99])
    ((dest, msg),) = out
    assert dest == 1 and msg.token_ids == (1, 2, 3)
    assert a.trace[-1].kept is False


def test_finish_releases_state_on_models_that_hold_it():
    a = make_subserver(0, program=ScriptedProgram(0, 2, {"r0": [(1, True)]}))
    b = make_subserver(1, program=ScriptedProgram(1, 2, {"r0": [(0, True)]}))
    a.receive(make_arrival(max_tokens=3), 0.0)
    b.receive(step_all(a, [1])[1][0][1], 1.0)
    a.receive(step_all(b, [2])[1][0][1], 2.0)
    _, out = step_all(a, [3])
    dests = sorted(d for d, _ in out)
    assert dests == [CLIENT, 1]
    release = next(m for d, m in out if d == 1)
    b.receive(release, 3.0)
    assert b.requests == {}


def test_threshold_delays_launch_until_enough_ready():
    sub = make_subserver(threshold=2)
    sub.receive(make_arrival("a"), 0.0)
    assert sub.launch(0.0) is None
    sub.receive(make_arrival("b"), 0.5)
    batch = sub.launch(0.5)
    assert batch is not None and batch.request_ids == ["a", "b"]


def test_threshold_capped_by_active_count():
    sub = make_subserver(threshold=4)
    sub.num_active = 1
    sub.receive(make_arrival("a"), 0.0)
    assert sub.launch(0.0) is not None


def test_threshold_table_keyed_by_active_requests():
    sub = make_subserver(threshold=1, table={4: 3})
    for rid in "abc":
        sub.receive(make_arrival(rid), 0.0)
    sub.num_active = 8
    sub.receive(make_arrival("d"), 0.0)
    assert sub.policy.threshold_for(3) == 1 and sub.policy.threshold_for(8) == 3
    assert sub.launch(0.0).size == 4


def test_max_wait_launches_a_short_queue():
    sub = make_subserver(threshold=3, max_wait_s=0.25)
    sub.receive(make_arrival("a"), 1.0)
    assert sub.next_deadline() == 1.25
    assert sub.launch(1.2) is None
    assert sub.launch(1.25).size == 1


def test_max_batch_splits_queue():
    sub = make_subserver(threshold=1, max_batch=2)
    for rid in "abc":
        sub.receive(make_arrival(rid), 0.0)
    batch = sub.launch(0.0)
    assert batch.request_ids == ["a", "b"]
    assert sub.launch(0.0) is None  # one step at a time
    sub.complete(batch, make_step([1, 1], batch.request_ids), 1.0)
    assert sub.launch(1.0).request_ids == ["c", "a"]  # a and b re-queued behind c


def test_abort_while_running_drops_result_and_frees_state():
    sub = make_subserver()
    sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    assert sub.abort("a")
    assert sub.complete(batch, make_step([5], ["a"]), 1.0) == []
    assert sub.requests == {} and not sub.abort("a")


def test_protocol_errors_are_reported():
    sub = make_subserver()
    sub.receive(make_arrival("a"), 0.0)
    with pytest.raises(ProtocolError, match="request a received while WAITING"):
        sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    with pytest.raises(ProtocolError, match="request a received while RUNNING"):
        sub.receive(make_arrival("a"), 0.0)
    with pytest.raises(ProtocolError, match="2 outputs for a batch of 1"):
        sub.complete(batch, make_step([1, 2], ["a", "x"]), 1.0)


def test_a_peer_message_for_an_unknown_request_needs_its_spec():
    sub = make_subserver(model=1)
    handoff = PeerReq("ghost", start=0, token_ids=(1, 2, 3, 4), anchors=(3, 0), origin=0)
    with pytest.raises(ProtocolError, match="model 1: unknown request ghost without spec"):
        sub.receive(handoff, 0.0)
    assert sub.requests == {} and sub.num_ready == 0


def test_completing_a_batch_that_is_not_running_is_refused():
    sub = make_subserver()
    sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    sub.complete(batch, make_step([1], ["a"]), 1.0)
    with pytest.raises(ProtocolError, match="completing a batch that is not running"):
        sub.complete(batch, make_step([1], ["a"]), 2.0)  # the same batch twice
    assert sub.requests["a"].token_ids == [1, 2, 3, 1]  # the refused step committed nothing


def test_a_destination_outside_the_models_is_refused():
    program = ScriptedProgram(0, 2, {"a": [(2, True)]})
    sub = make_subserver(program=program)
    sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    with pytest.raises(ProgramError, match=r"router\.scripted: route\(\) returned destination 2; models are 0\.\.1"):
        sub.complete(batch, make_step([1], ["a"]), 1.0)


def test_peer_slack_keeps_thresholds_feasible_as_requests_finish():
    from trcore import policies_for

    p0, p1 = policies_for([3, 3])  # feasible for 8 active requests: (3-1) + (3-1) < 8
    assert p0.threshold_for(8) == 3
    # with 3 active, (3, 3) could deadlock (2 waiting at each model); each clamps to 3 - 2 = 1
    assert p0.threshold_for(3) == 1 and p1.threshold_for(3) == 1


@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.integers(1, 40))
def test_clamped_thresholds_are_feasible_for_every_active_count(thresholds, n):
    from trcore import policies_for

    policies = policies_for(thresholds)
    assert sum(p.threshold_for(n) - 1 for p in policies) < n
    if is_feasible(thresholds, n):
        assert [p.threshold_for(n) for p in policies] == thresholds  # nothing clamped where already feasible
