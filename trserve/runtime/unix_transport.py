"""Messages between the processes of one machine without ZeroMQ (``server.transport: unix``): Unix
``SOCK_SEQPACKET`` sockets carrying the same typed msgpack (:mod:`trserve.runtime.wire`).

A ZeroMQ message crosses two I/O threads, each woken in turn, before the receiver's loop sees it; here the send
call writes straight into the receiver's socket, so a blocked receiver is the only thread woken. Every process
listens on one socket file in the run's private directory (its inbox, ``unix://PATH``) and connects one socket per
peer it sends to; the kernel keeps each connection's messages whole and in order. A message longer than
:data:`FRAME_BYTES` goes as several packets (a first byte of 1 says more follow). A send never blocks: what the
kernel cannot take now (a peer that does not read, one not bound yet) waits in the outbox and goes first at the
next send or receive. A message for a peer whose connection broke (it died) is dropped with what was queued, as
ZeroMQ drops what a dead peer never took; the launcher's ``Rewire`` points the outbox at its successor.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from trserve.runtime.transport import CurveKeys, decoded
from trserve.runtime.wire import encode

SCHEME = "unix://"
#: Payload bytes per packet; longer messages are split (a Unix socket's default send buffer is about 208 KiB).
FRAME_BYTES = 64 * 1024
MORE, LAST = b"\x01", b"\x00"
#: Send buffer asked for per connection (the kernel caps it at ``net.core.wmem_max``).
SEND_BUFFER = 4 * 1024 * 1024
#: While an outbox holds what a peer could not take yet, a waiting receive wakes this often to retry.
RETRY_S = 0.001
_GONE = (BrokenPipeError, ConnectionResetError)
_NOT_YET = (FileNotFoundError, ConnectionRefusedError)


def path_of(address: str) -> str:
    if not address.startswith(SCHEME):
        raise ValueError(f"not a unix transport address: {address!r}")
    return address[len(SCHEME) :]


def packets(message: Any) -> list[list[bytes]]:
    """``message`` encoded, as the packets that carry it (each a header byte and a payload)."""
    data = encode(message)
    if len(data) <= FRAME_BYTES:
        return [[LAST, data]]
    view = memoryview(data)
    cuts = range(0, len(data), FRAME_BYTES)
    return [[MORE if start + FRAME_BYTES < len(data) else LAST, view[start : start + FRAME_BYTES]] for start in cuts]  # type: ignore[list-item]


class Peer:
    """The outbox for one peer process: its address, the connection (made on first use) and what waits."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.sock: socket.socket | None = None
        self.pending: deque[list[bytes]] = deque()

    def flush(self) -> None:
        """Send what waits, as far as the peer takes it now."""
        if self.address is None or not self.pending:
            return
        if self.sock is None and not self._connect():
            return
        assert self.sock is not None
        try:
            while self.pending:
                self.sock.sendmsg(self.pending[0])
                self.pending.popleft()
        except BlockingIOError:
            return
        except _GONE:  # the peer died: drop what it never took; later messages try its address again
            self.close()
            self.pending.clear()

    def _connect(self) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        try:
            sock.connect(path_of(self.address or ""))
        except _NOT_YET:  # not bound yet: try again at the next send or receive
            sock.close()
            return False
        sock.setblocking(False)
        self.sock = sock
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class UnixOutboxes:
    """One connection per peer process, keyed by its index; the same interface as
    :class:`trserve.runtime.transport.Outboxes`."""

    def __init__(self, peers: Mapping[int, str]) -> None:
        self.peers: dict[int, Peer] = {dest: Peer(address) for dest, address in peers.items()}

    @property
    def destinations(self) -> list[int]:
        return list(self.peers)

    @property
    def addresses(self) -> dict[int, str]:
        return {dest: p.address for dest, p in self.peers.items() if p.address is not None}

    @property
    def is_waiting(self) -> bool:
        """Whether a connected peer has yet to take something (a retry is due)."""
        return any(p.pending and p.address is not None for p in self.peers.values())

    def send(self, dest: int, message: Any) -> None:
        peer = self.peers.get(dest)
        if peer is None:
            peer = self.peers[dest] = Peer(None)
        peer.pending.extend(packets(message))
        peer.flush()

    def flush(self) -> None:
        for peer in self.peers.values():
            peer.flush()

    def disconnect(self, dest: int) -> None:
        """Drop what was queued for ``dest`` (it died); later messages wait for its new address."""
        peer = self.peers.setdefault(dest, Peer(None))
        peer.close()
        peer.pending.clear()
        peer.address = None

    def rewire(self, dest: int, address: str) -> None:
        """Point the outbox for ``dest`` at a new inbox: what was queued for its old one is dropped, what waited
        for an address goes now."""
        peer = self.peers.setdefault(dest, Peer(None))
        if peer.address is not None:
            peer.pending.clear()
        peer.close()
        peer.address = address
        peer.flush()

    def close(self) -> None:
        for peer in self.peers.values():
            peer.close()


class UnixInbox:
    """The listening socket of ``bind_address`` and the connections peers made to it; reassembles and decodes
    what they send (bad messages are logged and counted, as :meth:`Inbox.decoded` does)."""

    def __init__(self, bind_address: str) -> None:
        self.path = path_of(bind_address)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a stale file of a process that died under this name
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.path)
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.address = bind_address
        self.counts: Counter[str] = Counter()
        self.conns: dict[int, socket.socket] = {}
        self._partial: dict[int, list[bytes]] = {}

    def accept(self) -> list[socket.socket]:
        """Take every connection waiting; returns them."""
        new = []
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return new
            conn.setblocking(False)
            self.conns[conn.fileno()] = conn
            new.append(conn)

    def read(self, fd: int, out: list[Any]) -> bool:
        """Append every whole message connection ``fd`` has for now to ``out``; False once the peer closed it (the
        caller stops watching it, then drops it with :meth:`drop`)."""
        conn = self.conns[fd]
        while True:
            try:
                packet = conn.recv(FRAME_BYTES + 1)
            except BlockingIOError:
                return True
            except ConnectionResetError:
                packet = b""
            if not packet:
                return False
            parts = self._partial.setdefault(fd, [])
            parts.append(packet[1:])
            if packet[:1] == LAST:
                del self._partial[fd]
                message = decoded(b"".join(parts) if len(parts) > 1 else parts[0], self.counts, self.address)
                if message is not None:
                    out.append(message)

    def drop(self, fd: int) -> None:
        self.conns.pop(fd).close()
        self._partial.pop(fd, None)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class UnixMailbox:
    """A worker process's blocking mailbox on this transport (the interface of
    :class:`trserve.runtime.transport.Mailbox`)."""

    def __init__(self, bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> None:
        self.inbox = UnixInbox(bind_address)
        self.address, self.counts = self.inbox.address, self.inbox.counts
        self.outboxes = UnixOutboxes(peers)
        self.send, self.rewire = self.outboxes.send, self.outboxes.rewire
        self.epoll = select.epoll()
        self.epoll.register(self.inbox.listener.fileno(), select.EPOLLIN)

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        """Wait up to ``timeout_s`` (None: forever) for a message, then take every message already queued."""
        self.outboxes.flush()
        if self.outboxes.is_waiting:
            timeout_s = RETRY_S if timeout_s is None else min(timeout_s, RETRY_S)
        out: list[Any] = []
        listener = self.inbox.listener.fileno()
        for fd, _ in self.epoll.poll(-1 if timeout_s is None else timeout_s):
            if fd == listener:
                for conn in self.inbox.accept():
                    self.epoll.register(conn.fileno(), select.EPOLLIN)
            elif fd in self.inbox.conns and not self.inbox.read(fd, out):
                self.epoll.unregister(fd)
                self.inbox.drop(fd)
        return out

    def close(self) -> None:
        self.outboxes.close()
        self.inbox.close()
        self.epoll.close()
