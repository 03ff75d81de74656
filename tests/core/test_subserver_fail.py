"""``Subserver.fail`` (a step that will never complete) and ``min_tokens`` (stop tokens cannot end a request
before it has that many output tokens)."""

import pytest

from tests.factories import make_arrival, make_step, make_subserver
from trcore import CLIENT, ProtocolError, RequestStatus


def test_fail_forgets_the_running_batch_and_its_requests():
    sub = make_subserver(max_batch=2)
    for rid in ("a", "b", "c"):
        sub.receive(make_arrival(rid), 0.0)
    batch = sub.launch(0.0)
    assert batch is not None and batch.request_ids == ["a", "b"]
    failed = sub.fail(batch)
    assert [r.request_id for r in failed] == ["a", "b"]
    assert all(r.status == RequestStatus.FINISHED for r in failed)
    assert sub.running is None and set(sub.requests) == {"c"}
    nxt = sub.launch(1.0)  # the core launches again: the failed batch no longer blocks it
    assert nxt is not None and nxt.request_ids == ["c"]


def test_fail_skips_requests_aborted_while_the_step_ran():
    sub = make_subserver()
    sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    assert sub.abort("a")
    assert sub.fail(batch) == [] and sub.running is None


def test_fail_refuses_a_batch_that_is_not_running():
    sub = make_subserver()
    sub.receive(make_arrival("a"), 0.0)
    batch = sub.launch(0.0)
    sub.complete(batch, make_step([5], ["a"]), 1.0)
    with pytest.raises(ProtocolError, match="not running"):
        sub.fail(batch)


def run_one(min_tokens: int, tokens: list[int]) -> tuple[int, ...]:
    """Feed ``tokens`` one step at a time (stop token 0) until the request finishes; its output."""
    sub = make_subserver(num_models=1)
    arrival = make_arrival(max_tokens=6, num_models=1, stop_token_ids=frozenset({0}), min_tokens=min_tokens)
    sub.receive(arrival, 0.0)
    for k, token in enumerate(tokens):
        batch = sub.launch(float(k))
        assert batch is not None
        out = sub.complete(batch, make_step([token], batch.request_ids), float(k) + 0.5)
        if out:
            assert out[0][0] == CLIENT
            return out[0][1].token_ids
    raise AssertionError("request did not finish")


def test_min_tokens_keeps_stop_tokens_from_ending_the_request_early():
    assert run_one(0, [5, 0, 7]) == (5, 0)
    assert run_one(2, [5, 0, 7, 0]) == (5, 0, 7, 0)  # the 2nd token is a stop token but only the 3rd may stop
    assert run_one(2, [0, 0, 0]) == (0, 0, 0)  # the first stop token past min_tokens ends it
    assert run_one(6, [0] * 6) == (0,) * 6  # max_tokens still ends it
