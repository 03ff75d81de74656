"""The front end's side of the ``unix`` transport (:mod:`trserve.runtime.unix_transport`): its mailbox, read on
the running asyncio loop, and the factories that open a process's mailbox for its inbox address (this transport
for ``unix://``, ZeroMQ's otherwise)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from typing import Any

from trserve.runtime.transport import AsyncMailbox, CurveKeys, Mailbox, PeerViews
from trserve.runtime.unix_transport import RETRY_S, SCHEME, UnixInbox, UnixMailbox, UnixOutboxes


class AsyncUnixMailbox(PeerViews):
    """The front end's mailbox on this transport, read on the running asyncio loop (the interface of
    :class:`trserve.runtime.transport.AsyncMailbox`)."""

    def __init__(self, bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> None:
        self.inbox = UnixInbox(bind_address)
        self.address, self.counts = self.inbox.address, self.inbox.counts
        self.outboxes = UnixOutboxes(peers)
        self.disconnect = self.outboxes.disconnect
        self._messages: deque[Any] = deque()
        self._arrived: asyncio.Event | None = None
        self._retry: asyncio.TimerHandle | None = None

    def send(self, dest: int, message: Any) -> None:
        self.outboxes.send(dest, message)
        self._schedule_retry()

    def rewire(self, dest: int, address: str) -> None:
        self.outboxes.rewire(dest, address)
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        """While a peer has yet to take something, retry soon on the running loop."""
        if self._retry is None and self.outboxes.is_waiting:
            with contextlib.suppress(RuntimeError):  # no running loop: the next send retries
                self._retry = asyncio.get_running_loop().call_later(RETRY_S, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.outboxes.flush()
        self._schedule_retry()

    async def receive(self) -> Any:
        """The next message (bad ones are logged and dropped)."""
        if self._arrived is None:
            self._arrived = asyncio.Event()
            asyncio.get_running_loop().add_reader(self.inbox.listener.fileno(), self._accept)
        while not self._messages:
            self._arrived.clear()
            await self._arrived.wait()
        return self._messages.popleft()

    def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        for conn in self.inbox.accept():
            loop.add_reader(conn.fileno(), self._read, conn.fileno())
            self._read(conn.fileno())

    def _read(self, fd: int) -> None:
        out: list[Any] = []
        if not self.inbox.read(fd, out):
            asyncio.get_running_loop().remove_reader(fd)
            self.inbox.drop(fd)
        if out:
            self._messages.extend(out)
            assert self._arrived is not None
            self._arrived.set()

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for fd in [self.inbox.listener.fileno(), *self.inbox.conns]:
                loop.remove_reader(fd)
        self.outboxes.close()
        self.inbox.close()


def open_mailbox(bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> Any:
    """A worker's mailbox for ``bind_address``: this transport's for ``unix://``, ZeroMQ's otherwise."""
    cls = UnixMailbox if bind_address.startswith(SCHEME) else Mailbox
    return cls(bind_address, peers, keys)


def open_async_mailbox(bind_address: str, peers: Mapping[int, str], keys: CurveKeys | None = None) -> Any:
    """The front end's mailbox for ``bind_address``: this transport's for ``unix://``, ZeroMQ's otherwise."""
    cls = AsyncUnixMailbox if bind_address.startswith(SCHEME) else AsyncMailbox
    return cls(bind_address, peers, keys)
