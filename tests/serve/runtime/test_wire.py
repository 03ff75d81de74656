"""The wire format (``trserve.runtime.transport.encode``/``decode``): typed msgpack round trips of every message,
a pickle fallback for values msgspec does not know, and no decoding into classes outside the project."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from trcore import PeerReq
from trcore.request import RequestSpec
from trserve.crossval import messages as crossval_messages
from trserve.runtime import messages
from trserve.runtime.transport import decode, encode

SPEC = RequestSpec("r1", 12, 64, frozenset({2, 3}), 1.5, {"temperature": 0.0, "seed": 4}, 1)
SAMPLES = [
    PeerReq("r1", 3, tuple(range(40)), (3, 5), 0, SPEC, False, {"handoff_prob": 0.3, "schedule": [[1, True]]}),
    PeerReq("r1", 3, (5, 6), (3, 5), 1, is_finished=True),
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
    ),
    messages.State(0, 1, 2, 3, 4, 0.5, 100, 7, {"python_objects": 5}),
    messages.StepCall(3, [("a", [1, 2], {"temperature": 0.5})]),
    messages.StepReply(3, [(5, {5: -0.1, 6: -2.0}, 0.3), (6, {}, None)], 0.006, 0.1, emulated_s=0.006),
    messages.OneToken("a", 2, [1, 2, 3], {}),
    messages.TokenReply("a", 2, 9, {9: -0.5}, None, 0.01),
    messages.Ready(0, 123, 0.0, ("entropy", "token_ids")),
    messages.Abort("x"),
    messages.Shutdown(),
    messages.Probe(3, True),
    messages.Rewire(1, "ipc:///tmp/x"),
    messages.Release(["a", "b"]),
    messages.Finished("b", (1, 2), "length"),
    messages.Failed("c", "boom"),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_wire_typed(message):
    data = encode(message)
    assert data.startswith(f"{type(message).__module__}:{type(message).__qualname__}\n".encode())
    back = decode(data)
    assert back == message and type(back) is type(message)


def test_every_message_class_has_a_sample():
    """A new message class must be added to SAMPLES (so its round trip is tested)."""
    members = inspect.getmembers(messages, dataclasses.is_dataclass)
    classes = {c for _, c in members if c.__module__ == messages.__name__}
    assert classes <= {type(m) for m in SAMPLES}


def test_messages_of_other_rooms_go_as_pickles():
    message = crossval_messages.Reconfigure(3, record_trace=True)
    data = encode(message)
    assert data.startswith(b"pickle\n") and decode(data) == message


def test_a_value_msgspec_does_not_know_goes_as_a_pickle():
    message = messages.Abort(np.int64(3))  # type: ignore[arg-type]
    data = encode(message)
    assert data.startswith(b"pickle\n") and decode(data) == message


def test_classes_outside_the_project_are_refused():
    with pytest.raises(ValueError, match="refusing"):
        decode(b"os:system\n" + encode(messages.Abort("x")).split(b"\n", 1)[1])
