"""The mailboxes over real ZeroMQ sockets: ``ipc`` and ``tcp`` (CURVE), strangers refused, bad bytes dropped and
counted without stopping the receiver, messages for a peer not wired yet held until its address arrives."""

from __future__ import annotations

import asyncio
import gc
import os
import stat
import threading
import time

import pytest
import zmq

from trserve.config import ServeConfig
from trserve.runtime.endpoints import BIND_HOST_ENV, Endpoints
from trserve.runtime.messages import Abort, Probe, Shutdown
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import BAD, FRONTEND, AsyncMailbox, CurveKeys, Mailbox
from trserve.runtime.wire import encode


def tcp_endpoints(tmp_path, num_procs: int = 1) -> Endpoints:
    return Endpoints(str(tmp_path), num_procs, (0,) * num_procs, "tcp", "127.0.0.1", keys=CurveKeys.generate())


def receive(box: Mailbox, count: int, timeout_s: float = 10.0, kind: type = object) -> list:
    """Messages of ``kind`` until ``count`` arrived or the timeout passed."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += [m for m in box.receive_all(0.1) if isinstance(m, kind)]
    return out


def stranger(address: str, curve: tuple[bytes, bytes, bytes] | None = None) -> zmq.Socket:
    """A PUSH socket of someone outside the run: plain, or a CURVE client with ``(server key, public, secret)``."""
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    sock.connect(address)
    return sock


def test_tcp_mailboxes_bind_random_ports_and_talk_over_curve(tmp_path):
    ep = tcp_endpoints(tmp_path)
    front = Mailbox(ep.bind_address(FRONTEND), {}, ep.keys)
    ep = ep.with_address(FRONTEND, front.address)
    worker = ep.mailbox(0)
    try:
        assert worker.address.startswith("tcp://127.0.0.1:") and not worker.address.endswith(":*")
        worker.send(FRONTEND, Probe(1))
        front.rewire(0, worker.address)
        front.send(0, Abort("r", 2))
        assert receive(front, 1) == [Probe(1)]
        assert receive(worker, 1) == [Abort("r", 2)]
    finally:
        worker.close()
        front.close()


def test_strangers_are_refused_and_the_run_goes_on(tmp_path):
    ep = tcp_endpoints(tmp_path)
    front = Mailbox(ep.bind_address(FRONTEND), {}, ep.keys)
    worker = ep.with_address(FRONTEND, front.address).mailbox(0)
    made_up_public, made_up_secret = zmq.curve_keypair()
    assert ep.keys is not None
    strangers = [
        stranger(worker.address),  # no CURVE at all
        stranger(worker.address, (ep.keys.server_public.encode(), made_up_public, made_up_secret)),  # unknown key
        stranger(worker.address, (made_up_public, made_up_public, made_up_secret)),  # wrong server key
    ]
    try:
        for sock in strangers:
            sock.send(encode(Shutdown()), zmq.NOBLOCK)
            sock.send(b"garbage", zmq.NOBLOCK)
        assert receive(worker, 1, timeout_s=1.0) == []
        front.rewire(0, worker.address)
        front.send(0, Abort("real"))
        assert receive(worker, 2, timeout_s=2.0) == [Abort("real")]
        assert dict(worker.counts) == {"Abort": 1}  # nothing of the strangers was even decoded
    finally:
        for sock in strangers:
            sock.close(linger=0)
        worker.close()
        front.close()


def test_bad_bytes_are_dropped_counted_and_the_next_message_arrives(tmp_path):
    ep = Endpoints(str(tmp_path), 1)
    worker = ep.mailbox(0)
    sock = stranger(worker.address)  # ipc: only this user's processes reach the private run directory
    try:
        for data in (b"garbage", b"os:system\nxx", encode(Abort("x"))[:-2], encode(Abort("ok"))):
            sock.send(data)
        assert receive(worker, 1) == [Abort("ok")]
        assert worker.counts == {BAD: 3, "Abort": 1}
    finally:
        sock.close(linger=0)
        worker.close()


def test_the_front_ends_inbox_drops_bad_bytes_too(tmp_path):
    async def scenario() -> None:
        box = AsyncMailbox(f"ipc://{tmp_path}/fe.sock", {})
        sock = stranger(box.address)
        try:
            sock.send(b"\x00\x01not a message")
            sock.send(encode(Probe(7)))
            assert await asyncio.wait_for(box.receive(), 10.0) == Probe(7)
            assert box.counts == {BAD: 1, "Probe": 1}
        finally:
            sock.close(linger=0)
            box.close()

    asyncio.run(scenario())


def test_messages_for_a_peer_without_an_address_wait_for_it(tmp_path):
    ep = Endpoints(str(tmp_path), 2)
    one = ep.mailbox(1)
    zero = Mailbox(ep.bind_address(0), {})  # knows no peer yet, as a tcp worker before its Rewire
    try:
        zero.send(1, Abort("early"))
        assert receive(one, 1, timeout_s=0.5) == []
        zero.rewire(1, one.address)
        zero.send(1, Abort("late"))
        assert receive(one, 2) == [Abort("early"), Abort("late")]
    finally:
        zero.close()
        one.close()


def test_a_worker_binds_the_host_its_environment_names(tmp_path, monkeypatch):
    ep = tcp_endpoints(tmp_path)
    assert ep.bind_address(0) == "tcp://127.0.0.1:*"
    monkeypatch.setenv(BIND_HOST_ENV, "127.0.0.2")
    assert ep.bind_address(0) == "tcp://127.0.0.2:*"
    box = ep.mailbox(0)
    try:
        assert box.address.startswith("tcp://127.0.0.2:")
    finally:
        box.close()


def test_the_run_spec_keeps_addresses_and_keys_and_only_its_user_reads_it(tmp_path):
    model = {"name": "a", "emulated": {"latency_ms": 1.0}}
    cfg = ServeConfig.model_validate({"backend": "emulated", "models": [model], "server": {"transport": "tcp"}})
    ep = tcp_endpoints(tmp_path, 2).with_address(FRONTEND, "tcp://127.0.0.1:5555").with_address(1, "tcp://h:6")
    spec = RunSpec(cfg, ("",), (1,), (), ep)
    path = tmp_path / "run.json"
    spec.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert RunSpec.load(path).endpoints == ep
    with pytest.raises(KeyError):
        ep.inbox(0)  # tcp: unknown until the worker reports it


def test_mailboxes_left_open_in_a_reference_cycle_are_collected_without_hanging(tmp_path):
    """A failed caller's traceback can leave its mailboxes unclosed in a cycle; collecting them must not wait
    forever on their sockets (it once hung the whole suite)."""

    async def leave_open() -> None:
        cycle: list = [AsyncMailbox(f"ipc://{tmp_path}/fe.sock", {0: f"ipc://{tmp_path}/0.sock"})]
        cycle += [Mailbox(f"ipc://{tmp_path}/0.sock", {FRONTEND: cycle[0].address}), cycle]
        cycle[1].send(FRONTEND, Probe(1))

    asyncio.run(leave_open())
    collector = threading.Thread(target=gc.collect, daemon=True)
    collector.start()
    collector.join(20.0)
    assert not collector.is_alive()
