"""The server over ``server.transport: unix`` (hash engines, Unix sockets without ZeroMQ): the same answers as
over ``ipc`` and the reference, every inbox a socket file of the run directory, and what each inbox took counted
by class with nothing dropped. The restart over unix is in ``test_restart.py``."""

from __future__ import annotations

import asyncio

from tests.serve.server.test_tcp import NUM_STREAMS, answers, expected_tokens
from tests.serve.server_fixtures import Served


def test_unix_answers_equal_those_over_ipc_and_the_reference(hash_server: Served, unix_hash_server: Served):
    over_unix = asyncio.run(answers(unix_hash_server))
    assert over_unix == [expected_tokens(i) for i in range(NUM_STREAMS)]
    assert over_unix == asyncio.run(answers(hash_server))
    state = unix_hash_server.state()
    assert all(address.startswith("unix://") for address in state["inboxes"].values()), state["inboxes"]
    received = [w["received"] for w in state["workers"]]
    assert all(counts.get("Handoffs", 0) > 0 and "bad" not in counts for counts in received), received
