"""The ``unix`` transport over real Unix sockets: messages arrive whole and in order (long ones split into packets
and joined again), a send never blocks on a peer that does not read or is not bound yet, rewiring drops what a
dead peer never took, bad bytes are dropped and counted, and the front end's asyncio mailbox talks to a worker's."""

from __future__ import annotations

import asyncio
import socket
import time

from trcore import PeerReq
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.messages import Abort, Probe
from trserve.runtime.transport import BAD, FRONTEND
from trserve.runtime.unix_async import AsyncUnixMailbox
from trserve.runtime.unix_transport import FRAME_BYTES, LAST, UnixMailbox, path_of
from trserve.runtime.wire import encode


def receive(box: UnixMailbox, count: int, timeout_s: float = 10.0) -> list:
    """Messages until ``count`` arrived or the timeout passed."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += box.receive_all(0.1)
    return out


def test_endpoints_name_unix_sockets_in_the_run_directory_and_open_this_transport(tmp_path):
    ep = Endpoints(str(tmp_path), 2, (0, 3), "unix")
    assert ep.bind_address(FRONTEND) == f"unix://{tmp_path}/frontend.sock"
    assert ep.address(1) == f"unix://{tmp_path}/proc-1-g3.sock"  # known before it binds, as on ipc
    box = ep.mailbox(0)
    try:
        assert isinstance(box, UnixMailbox) and box.address == f"unix://{tmp_path}/proc-0-g0.sock"
    finally:
        box.close()


def test_messages_arrive_in_order_and_a_long_one_whole(tmp_path):
    ep = Endpoints(str(tmp_path), 2, transport="unix")
    zero, one = ep.mailbox(0), ep.mailbox(1)
    long = PeerReq("long", 0, tuple(range(100_000)), (0, 0), 0)  # several packets
    assert len(encode(long)) > 3 * FRAME_BYTES
    try:
        for k in range(50):
            zero.send(1, Abort(f"r{k}"))
        zero.send(1, long)
        zero.send(1, Abort("after"))
        assert receive(one, 52) == [*(Abort(f"r{k}") for k in range(50)), long, Abort("after")]
        assert one.counts == {"Abort": 51, "PeerReq": 1}
    finally:
        zero.close()
        one.close()


def test_a_send_never_blocks_on_a_peer_that_does_not_read_and_nothing_is_lost(tmp_path):
    ep = Endpoints(str(tmp_path), 2, transport="unix")
    zero, one = ep.mailbox(0), ep.mailbox(1)
    big = tuple(range(20_000))
    try:
        for k in range(400):  # far more than the socket buffers hold while "one" does not read
            zero.send(1, PeerReq(f"r{k}", 0, big, (0, 0), 0))
        assert zero.outboxes.is_waiting  # the rest waits in the outbox; the sends returned
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 400 and time.monotonic() < deadline:
            zero.receive_all(0)  # the sender's loop turns, retrying what waits
            got += one.receive_all(0.01)
        assert [m.request_id for m in got] == [f"r{k}" for k in range(400)] and got[-1].token_ids == big
    finally:
        zero.close()
        one.close()


def test_messages_for_a_peer_not_bound_yet_wait_for_it(tmp_path):
    ep = Endpoints(str(tmp_path), 2, transport="unix")
    zero = ep.mailbox(0)
    try:
        zero.send(1, Abort("early"))  # process 1 has not bound its socket yet
        one = ep.mailbox(1)
        zero.send(1, Abort("late"))
        assert receive(one, 2) == [Abort("early"), Abort("late")]
        one.close()
    finally:
        zero.close()


def test_rewiring_drops_what_the_dead_peer_never_took_and_sends_to_its_successor(tmp_path):
    ep = Endpoints(str(tmp_path), 2, transport="unix")
    zero, one = ep.mailbox(0), ep.mailbox(1)
    try:
        zero.send(1, Abort("to the old one"))
        one.close()  # it died before reading
        zero.send(1, Abort("lost"))
        successor = ep.with_generation(1, 1).mailbox(1)
        zero.rewire(1, successor.address)
        zero.send(1, Abort("new"))
        assert receive(successor, 1) == [Abort("new")]
        assert receive(successor, 1, timeout_s=0.3) == []
        successor.close()
    finally:
        zero.close()


def test_bad_bytes_are_dropped_and_counted_and_the_inbox_goes_on(tmp_path):
    ep = Endpoints(str(tmp_path), 1, transport="unix")
    box = ep.mailbox(0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path_of(box.address))
        sock.send(LAST + b"\x00\x01not a message")
        sock.send(b"\x01half a message")  # its end never comes: joined with the next packet, still not a message
        sock.send(LAST + b"\x92")
        sock.send(LAST + encode(Abort("ok")))
        assert receive(box, 1) == [Abort("ok")]
        assert box.counts == {BAD: 2, "Abort": 1}
    finally:
        sock.close()
        box.close()


def test_the_front_ends_mailbox_talks_to_a_workers_on_the_event_loop(tmp_path):
    ep = Endpoints(str(tmp_path), 1, transport="unix")

    async def scenario() -> None:
        front = AsyncUnixMailbox(ep.bind_address(FRONTEND), {0: ep.inbox(0)})
        front.send(0, Abort("before the worker binds"))
        worker = ep.mailbox(0)
        try:
            for k in range(3):
                worker.send(FRONTEND, Probe(k))
            assert [await asyncio.wait_for(front.receive(), 10.0) for _ in range(3)] == [Probe(0), Probe(1), Probe(2)]
            await asyncio.sleep(0.05)  # the front end's retry connects once the worker is bound
            front.send(0, Abort("after"))
            got: list = []
            for _ in range(100):
                got += worker.receive_all(0.0)
                if len(got) == 2:
                    break
                await asyncio.sleep(0.01)
            assert got == [Abort("before the worker binds"), Abort("after")]
        finally:
            worker.close()
            front.close()

    asyncio.run(scenario())
