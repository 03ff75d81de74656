"""Messages between the front end and the worker processes: ZeroMQ PUSH/PULL sockets carrying typed msgpack
(:mod:`trserve.runtime.wire`; never pickle).

Every process binds one PULL socket (its inbox) and connects one PUSH socket per process it talks to, so a
send never waits for the receiver (ZeroMQ queues it) and messages between two processes keep their order. A
message for a peer whose address is not known yet waits in the outbox until the peer is wired
(:meth:`Outboxes.rewire`): on ``tcp`` a peer's port is known only once it reports it.

Two transports (:class:`trserve.runtime.endpoints.Endpoints` says which): ``ipc`` sockets in the run's private
directory (mode 0700; only this user's processes reach them, no encryption), or ``tcp`` sockets on random
ports, every one authenticated and encrypted with ZeroMQ CURVE (:class:`CurveKeys`, made per run): inboxes are
CURVE servers whose ZAP authenticator accepts only the run's client key, outboxes CURVE clients. A stranger's
socket fails the handshake and none of its bytes reach :func:`~trserve.runtime.wire.decode`.
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio
from zmq.auth.thread import ThreadAuthenticator

from trserve.runtime.wire import WireError, decode, encode

log = logging.getLogger(__name__)

#: Inbox key of the front end in an address book (worker inboxes use the process index).
FRONTEND = -1
#: Where :attr:`Mailbox.counts` tallies messages dropped as undecodable.
BAD = "bad"


@dataclass(frozen=True)
class CurveKeys:
    """A run's CURVE keys (Z85 text): one pair for every inbox (server), one for every outbox (client)."""

    server_public: str
    server_secret: str
    client_public: str
    client_secret: str

    @classmethod
    def generate(cls) -> CurveKeys:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public.decode(), server_secret.decode(), client_public.decode(), client_secret.decode())

    def callback(self, domain: str, client_key: bytes) -> bool:
        """The ZAP check of a connecting client: only this run's client key passes."""
        return hmac.compare_digest(client_key, self.client_public.encode())


def decoded(data: bytes, counts: Counter[str], where: str) -> Any | None:
    """The message in ``data`` (counted by type in ``counts``), or None (logged, counted as :data:`BAD`) when it
    is not one."""
    try:
        message = decode(data)
    except WireError as exc:
        counts[BAD] += 1
        log.warning("dropped a message on %s: %s", where, exc)
        return None
    counts[type(message).__name__] += 1
    return message


def _push_socket(ctx: zmq.Context[Any], address: str, keys: CurveKeys | None) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)  # a closed outbox drops what a dead peer never took
    sock.setsockopt(zmq.SNDHWM, 0)  # never block the sender: hand-offs must not stall a model's loop
    if keys is not None:
        sock.curve_serverkey = keys.server_public.encode()
        sock.curve_publickey = keys.client_public.encode()
        sock.curve_secretkey = keys.client_secret.encode()
    sock.connect(address)
    return sock


class Inbox:
    """A bound PULL socket (a CURVE server behind a ZAP authenticator when ``keys`` are given); ``address`` is
    where it was bound (``tcp://host:*`` resolved to its port)."""

    def __init__(self, ctx: zmq.Context[Any], bind_address: str, keys: CurveKeys | None) -> None:
        self.auth: ThreadAuthenticator | None = None
        if keys is not None:
            self.auth = ThreadAuthenticator(ctx, log=log.getChild("zap"))
            self.auth.start()
            self.auth.configure_curve_callback("*", credentials_provider=keys)
        self.socket = ctx.socket(zmq.PULL)
        self.socket.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            self.socket.curve_secretkey = keys.server_secret.encode()
            self.socket.curve_publickey = keys.server_public.encode()
            self.socket.curve_server = True
        self.socket.bind(bind_address)
        self.address: str = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.counts: Counter[str] = Counter()

    def decoded(self, data: bytes) -> Any | None:
        """The message in ``data``, or None (logged, counted as :data:`BAD`) when it is not one."""
        return decoded(data, self.counts, self.address)

    def close(self) -> None:
        self.socket.close(linger=0)
        if self.auth is not None:
            self.auth.stop()


class Outboxes:
    """One PUSH socket per peer process, keyed by its index (the front end: :data:`FRONTEND`). ``flags`` go with
    every send (the front end's event loop sends with ``zmq.NOBLOCK``). Messages for a known peer without an
    address (:meth:`disconnect`, or never wired) wait until :meth:`rewire` gives one."""

    def __init__(
        self, ctx: zmq.Context[Any], peers: Mapping[int, str], flags: int = 0, keys: CurveKeys | None = None
    ) -> None:
        self.ctx, self.flags, self.keys = ctx, flags, keys
        self.sockets: dict[int, zmq.Socket[Any] | None] = {
            dest: _push_socket(ctx, address, keys) for dest, address in peers.items()
        }
        self.addresses: dict[int, str] = dict(peers)
        self.pending: dict[int, list[bytes]] = {}

    @property
    def destinations(self) -> list[int]:
        return list(self.sockets)

    def send(self, dest: int, message: Any) -> None:
        sock = self.sockets.get(dest)
        if sock is None:
            self.pending.setdefault(dest, []).append(encode(message))
        else:
            sock.send(encode(message), self.flags)

    def disconnect(self, dest: int) -> None:
        """Drop what was queued for ``dest`` (it died); later messages wait for its new address."""
        old = self.sockets.get(dest)
        if old is not None:
            old.close(linger=0)
        self.sockets[dest] = None
        self.addresses.pop(dest, None)

    def rewire(self, dest: int, address: str) -> None:
        """Point the outbox for ``dest`` at a new inbox (the peer restarted, or reported where it listens):
        what was queued for its old inbox is dropped, what waited for an address goes now."""
        self.disconnect(dest)
        sock = self.sockets[dest] = _push_socket(self.ctx, address, self.keys)
        self.addresses[dest] = address
        for data in self.pending.pop(dest, []):
            sock.send(data, self.flags)

    def close(self) -> None:
        for sock in self.sockets.values():
            if sock is not None:
                sock.close(linger=0)


class _HeldSockets:
    """A pyzmq context that closes the sockets it made when it is collected unclosed. pyzmq tracks them only
    weakly; in a reference cycle (a failed caller's traceback) those references are gone before the context's
    finalizer runs, and its ``term()`` then waits forever on sockets it can no longer see."""

    def socket(self, *args: Any, **kwargs: Any) -> Any:
        sock = super().socket(*args, **kwargs)  # type: ignore[misc]
        held = self.__dict__.setdefault("_held", [])  # not setattr: a context's attributes are options
        held[:] = [s for s in held if not s.closed]  # a rewired outbox's old socket is not kept for ever
        held.append(sock)
        return sock

    def __del__(self) -> None:
        for sock in self.__dict__.get("_held", ()):
            sock.close(linger=0)
        super().__del__()  # type: ignore[misc]


class _Context(_HeldSockets, zmq.Context):  # type: ignore[type-arg]
    """A blocking context (:class:`_HeldSockets`)."""


class _AsyncContext(_HeldSockets, zmq.asyncio.Context):
    """An asyncio context (:class:`_HeldSockets`)."""


class Mailbox:
    """A blocking mailbox for a worker process: one inbox, an outbox per peer."""

    def __init__(self, bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> None:
        self.ctx: zmq.Context[Any] = _Context()
        self.inbox = Inbox(self.ctx, bind_address, keys)
        self.address, self.counts = self.inbox.address, self.inbox.counts
        self.outboxes = Outboxes(self.ctx, peers, keys=keys)
        self.send, self.rewire = self.outboxes.send, self.outboxes.rewire
        self.poller = zmq.Poller()
        self.poller.register(self.inbox.socket, zmq.POLLIN)

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        """Wait up to ``timeout_s`` (None: forever) for a message, then take every message already queued
        (bad ones are logged and dropped)."""
        timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
        if not self.poller.poll(timeout_ms):
            return []
        out = []
        while True:
            try:
                data = self.inbox.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            message = self.inbox.decoded(data)
            if message is not None:
                out.append(message)

    def close(self) -> None:
        self.outboxes.close()
        self.inbox.close()


class PeerViews:
    """What the front end reads of the peers its mailbox sends to, from the mailbox's ``outboxes`` (both
    transports' asynchronous mailboxes)."""

    outboxes: Any

    @property
    def destinations(self) -> list[int]:
        return self.outboxes.destinations

    @property
    def addresses(self) -> dict[int, str]:
        """The inbox of every peer process this mailbox is wired to."""
        return self.outboxes.addresses


class AsyncMailbox(PeerViews):
    """The front end's mailbox: the same outboxes, and an inbox read on an asyncio loop."""

    def __init__(self, bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> None:
        self.inbox = Inbox(_AsyncContext(), bind_address, keys)
        self.address, self.counts = self.inbox.address, self.inbox.counts
        self.outboxes = Outboxes(_Context(), peers, zmq.NOBLOCK, keys)
        self.send, self.rewire, self.disconnect = self.outboxes.send, self.outboxes.rewire, self.outboxes.disconnect

    async def receive(self) -> Any:
        """The next message (bad ones are logged and dropped)."""
        while True:
            message = self.inbox.decoded(await self.inbox.socket.recv())
            if message is not None:
                return message

    def close(self) -> None:
        self.outboxes.close()
        self.inbox.close()
