"""The wire format (``trserve.runtime.wire``): typed msgpack round trips of every message (crossval's too), no
pickle at all, and a clear :class:`WireError` for bytes that are not a message of the project."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import random

import numpy as np
import pytest

from trcore import BatchingPolicy, PeerReq
from trcore.request import RequestSpec
from trserve.crossval import messages as crossval_messages
from trserve.crossval.messages import ProgramChoice
from trserve.runtime import messages
from trserve.runtime.wire import WireError, decode, encode

MARKOV = {"P": [[0.9, 0.1], [0.2, 0.8]], "C": [[1.0, 1.0], [1.0, 1.0]], "seed": 3}
SPEC = RequestSpec("r1", 12, 64, frozenset({2, 3}), 1.5, {"temperature": 0.0, "seed": 4}, 1)
SAMPLES = [
    PeerReq("r1", 3, tuple(range(40)), (3, 5), 0, SPEC, False, {"handoff_prob": 0.3, "schedule": [[1, True]]}),
    PeerReq("r1", 3, (5, 6), (3, 5), 1, is_finished=True),
    messages.Handoffs((PeerReq("r2", 0, (1, 2), (0, 0), 0, SPEC, extra={"k": 1}), PeerReq("r3", 1, (4,), (1, 0), 0))),
    messages.StepReport(
        0,
        2,
        3,
        0.006,
        0,
        2,
        1,
        0.1,
        [("a", 4, (7, 8))],
        [messages.Finished("b", (1, 2), "stop")],
        [messages.Failed("c", "boom")],
        [("a", 1, 5, {"k": 1}), ("d", 0, 2, None)],
        emulated_s=0.006,
        wait_cpu_s=1e-5,
        memory={"blocks_total": 71, "blocks_used": 12, "spilled": 3},
    ),
    messages.State(0, 1, 2, 3, 4, 0.5, 100, 7, {"python_objects": 5}, memory={"preempted": 2}),
    messages.StepCall(3, [("a", [1, 2], {"temperature": 0.5})]),
    messages.StepReply(3, [(5, {5: -0.1, 6: -2.0}, 0.3), (6, {}, None)], 0.006, 0.1, emulated_s=0.006),
    messages.OneToken("a", 2, [1, 2, 3], {}),
    messages.TokenReply("a", 2, 9, {9: -0.5}, None, 0.01),
    messages.Ready(0, 123, 0.0, ("entropy", "token_ids"), kv_capacity_tokens=2272),
    messages.Thresholds((1, 5)),
    messages.Abort("x"),
    messages.Shutdown(),
    messages.Active(12),
    messages.Probe(3, True),
    messages.Rewire(1, "ipc:///tmp/x"),
    messages.Release(["a", "b"]),
    messages.Finished("b", (1, 2), "length"),
    messages.Failed("c", "boom"),
    crossval_messages.Reconfigure(3, BatchingPolicy(2, {4: 3}, 0.02, 8, 1), ProgramChoice.of("markov", MARKOV), True),
    crossval_messages.Reconfigure(4),
    crossval_messages.TraceDump(1, 4, [("r1", 1, 0, True, 12.5, 12.49)], 2),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_wire_typed(message):
    data = encode(message)
    assert data.startswith(f"{type(message).__module__}:{type(message).__qualname__}\n".encode())
    assert b"pickle" not in data
    back = decode(data)
    assert back == message and type(back) is type(message)


@pytest.mark.parametrize("module", [messages, crossval_messages], ids=lambda m: m.__name__)
def test_every_message_class_has_a_sample(module):
    """A new message class must be added to SAMPLES (so its round trip is tested)."""
    members = inspect.getmembers(module, dataclasses.is_dataclass)
    classes = {c for _, c in members if c.__module__ == module.__name__}
    assert classes <= {type(m) for m in SAMPLES} | {ProgramChoice}


def test_a_program_travels_by_name_and_the_worker_builds_the_same_one():
    sent = crossval_messages.Reconfigure(1, program=ProgramChoice.of("markov", MARKOV))
    program = decode(encode(sent)).program.create(1, 2)
    assert type(program).name == "markov" and (program.model, program.num_models) == (1, 2)
    assert program.rng.getstate() == random.Random(MARKOV["seed"]).getstate()  # the seed arrived
    assert program._targets == [0, 1] and program._cum[0] == pytest.approx(0.2)  # row 1 of P arrived


def test_a_policy_keeps_its_table_and_is_checked_on_arrival():
    policy = decode(encode(crossval_messages.Reconfigure(1, policy=BatchingPolicy(2, {3: 1, 9: 4})))).policy
    assert policy.threshold_for(5) == 1 and policy.threshold_for(9) == 4
    bad = encode(crossval_messages.Reconfigure(1, policy=BatchingPolicy(2))).replace(b"\x02", b"\x00", 1)
    with pytest.raises(WireError, match="threshold"):
        decode(bad)


def test_numpy_numbers_go_as_plain_numbers():
    back = decode(encode(messages.Abort("x", np.int64(3))))  # type: ignore[arg-type]
    assert back == messages.Abort("x", 3) and type(back.incarnation) is int


def test_objects_that_are_not_messages_are_refused_when_sent():
    with pytest.raises(TypeError, match="not a message"):
        encode(np.float64(1.0))
    with pytest.raises(TypeError, match="cannot go on the wire"):
        encode(messages.Failed("x", object()))  # type: ignore[arg-type]


BODY = encode(messages.Abort("x")).split(b"\n", 1)[1]


@pytest.mark.parametrize(
    "data, why",
    [
        (b"os:system\n" + BODY, "refusing"),
        (b"builtins:dict\n" + BODY, "refusing"),
        (b"trserve.crossval.harness:StepRecord\n" + BODY, "refusing"),  # a dataclass, but not a message
        (b"trserve.runtime.messages:INCARNATION\n" + BODY, "no such message class"),
        (b"trserve.runtime.messages:Nope\n" + BODY, "no such message class"),
        (b"trserve.runtime.messages:Abort\n\xc1\xff", "malformed"),
        (b"trserve.runtime.messages:Ready\n" + BODY, "malformed"),
        (b"pickle\n" + pickle.dumps(messages.Abort("x")), "refusing"),
        (b"\x80\x04garbage without a name", "no message class name"),
        (b"", "no message class name"),
    ],
)
def test_bytes_that_are_not_a_message_raise_a_clear_error(data, why):
    with pytest.raises(WireError, match=why):
        decode(data)
