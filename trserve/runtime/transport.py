"""Local IPC between the front end and the subserver processes: ZeroMQ PUSH/PULL sockets carrying typed
msgpack messages.

Every process binds one PULL socket (its inbox) and connects one PUSH socket per process it talks to, so a
send never waits for the receiver (ZeroMQ queues it) and messages between two processes keep their order.

Wire format (:func:`encode`): the message's class as ``module:QualName`` and a newline, then its fields as
msgpack (msgspec, as vLLM v1's engine core uses): 3-4x faster than pickle for the small messages and hand-offs
of a step, and it decodes only into a message class of the project's own packages (``trserve``, ``trcore``),
validated against its field types, never arbitrary objects. A message msgspec cannot encode (a field of a type
it does not know) goes as a pickle under the name ``pickle``; only our own processes share these sockets (IPC
files in a private run directory).
"""

from __future__ import annotations

import importlib
import mmap
import os
import pickle
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import zmq
import zmq.asyncio

#: Inbox key of the front end in an address book (model inboxes use the model index).
FRONTEND = -1


@dataclass(frozen=True)
class Endpoints:
    """The IPC addresses of one server run: an inbox per worker process and one for the front end.

    In the routed mode process ``m`` serves model ``m``. ``generation[p]`` changes when process ``p``
    restarts, so peers reconnect to a fresh inbox and drop what they had queued for the dead process."""

    run_dir: str
    num_procs: int
    generation: tuple[int, ...] = ()

    def inbox(self, index: int) -> str:
        gen = self.generation[index] if self.generation else 0
        return f"ipc://{self.run_dir}/proc-{index}-g{gen}.sock"

    @property
    def frontend(self) -> str:
        return f"ipc://{self.run_dir}/frontend.sock"

    @property
    def active_file(self) -> str:
        return f"{self.run_dir}/active"

    def with_generation(self, index: int, generation: int) -> Endpoints:
        gens = list(self.generation or (0,) * self.num_procs)
        gens[index] = generation
        return Endpoints(self.run_dir, self.num_procs, tuple(gens))

    def address_book(self) -> dict[int, str]:
        """Inbox address of every process, keyed by process index (front end: :data:`FRONTEND`)."""
        book = {p: self.inbox(p) for p in range(self.num_procs)}
        book[FRONTEND] = self.frontend
        return book

    def mailbox(self, index: int) -> Mailbox:
        """Process ``index``'s mailbox: its own inbox bound, an outbox to every other process and the front end."""
        book = self.address_book()
        return Mailbox(book.pop(index), book)


#: Modules whose message classes travel typed (the hot path: steps, hand-offs); others' messages go as pickles.
WIRE_PACKAGES = ("trserve.runtime.", "trcore.")
_PICKLE = b"pickle"
_ENCODER = msgspec.msgpack.Encoder()
_names: dict[type, bytes] = {}
_decoders: dict[bytes, msgspec.msgpack.Decoder[Any]] = {}


def encode(message: Any) -> bytes:
    """A message as bytes on the wire (the only place the wire format is chosen)."""
    cls = type(message)
    name = _names.get(cls)
    if name is None:
        name = _names[cls] = _wire_name(cls)
    if name != _PICKLE:
        try:
            return name + b"\n" + _ENCODER.encode(message)
        except (TypeError, msgspec.EncodeError):
            pass  # a field msgspec does not know (e.g. a numpy number): this one message goes as a pickle
    return _PICKLE + b"\n" + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def _wire_name(cls: type) -> bytes:
    """``module:QualName`` of a class that travels typed (msgspec can decode into it), else ``pickle``."""
    if not cls.__module__.startswith(WIRE_PACKAGES) or "<" in cls.__qualname__:
        return _PICKLE
    name = f"{cls.__module__}:{cls.__qualname__}".encode()
    try:
        _decoders.setdefault(name, msgspec.msgpack.Decoder(cls, strict=False))
    except TypeError:  # a field type msgspec cannot decode (e.g. a routing program object)
        return _PICKLE
    return name


def decode(data: bytes) -> Any:
    """The message :func:`encode` wrote."""
    cut = data.index(b"\n")
    name, body = data[:cut], memoryview(data)[cut + 1 :]
    if name == _PICKLE:
        return pickle.loads(body)
    decoder = _decoders.get(name)
    if decoder is None:
        decoder = _decoders[name] = msgspec.msgpack.Decoder(_message_class(name.decode()), strict=False)
    return decoder.decode(body)


def _message_class(name: str) -> type:
    """The class ``module:QualName`` of a message, only from :data:`WIRE_PACKAGES`."""
    module, _, qualname = name.partition(":")
    if not module.startswith(WIRE_PACKAGES):
        raise ValueError(f"refusing to decode a message of class {name!r}")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found  # type: ignore[no-any-return]


def _push_socket(ctx: zmq.Context[Any], address: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)  # a closed outbox drops what a dead peer never took
    sock.setsockopt(zmq.SNDHWM, 0)  # never block the sender: hand-offs must not stall a model's loop
    sock.connect(address)
    return sock


class Outboxes:
    """One PUSH socket per peer process, keyed by its index (the front end: :data:`FRONTEND`). ``flags`` go with
    every send (the front end's event loop sends with ``zmq.NOBLOCK``)."""

    def __init__(self, ctx: zmq.Context[Any], peers: Mapping[int, str], flags: int = 0) -> None:
        self.ctx, self.flags = ctx, flags
        self.sockets = {dest: _push_socket(ctx, address) for dest, address in peers.items()}

    @property
    def destinations(self) -> list[int]:
        return list(self.sockets)

    def send(self, dest: int, message: Any) -> None:
        self.sockets[dest].send(encode(message), self.flags)

    def rewire(self, dest: int, address: str) -> None:
        """Point the outbox for ``dest`` at a new inbox (the peer restarted); queued messages are dropped."""
        old = self.sockets.pop(dest, None)
        if old is not None:
            old.close(linger=0)
        self.sockets[dest] = _push_socket(self.ctx, address)

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(linger=0)


@dataclass
class Mailbox:
    """A blocking mailbox for a worker process: one inbox, an outbox per peer."""

    inbox_address: str
    peers: Mapping[int, str]
    ctx: zmq.Context[Any] = field(default_factory=zmq.Context)

    def __post_init__(self) -> None:
        self.inbox = self.ctx.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.bind(self.inbox_address)
        self.outboxes = Outboxes(self.ctx, self.peers)
        self.send, self.rewire = self.outboxes.send, self.outboxes.rewire
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, zmq.POLLIN)

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        """Wait up to ``timeout_s`` (None: forever) for a message, then take every message already queued."""
        timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
        if not self.poller.poll(timeout_ms):
            return []
        out = []
        while True:
            try:
                out.append(decode(self.inbox.recv(zmq.NOBLOCK)))
            except zmq.Again:
                return out

    def close(self) -> None:
        self.outboxes.close()
        self.inbox.close(linger=0)


class AsyncMailbox:
    """The front end's mailbox: the same outboxes, and an inbox read on an asyncio loop."""

    def __init__(self, inbox_address: str, peers: Mapping[int, str]) -> None:
        self._actx = zmq.asyncio.Context()
        self.inbox = self._actx.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.bind(inbox_address)
        self.outboxes = Outboxes(zmq.Context(), peers, zmq.NOBLOCK)
        self.send, self.rewire = self.outboxes.send, self.outboxes.rewire

    @property
    def destinations(self) -> list[int]:
        return self.outboxes.destinations

    async def receive(self) -> Any:
        """The next message."""
        return decode(await self.inbox.recv())

    def close(self) -> None:
        self.outboxes.close()
        self.inbox.close(linger=0)


class ActiveCounter:
    """The system-wide active-request count in a shared 8-byte file mapping.

    The front end is the only writer; subservers read it before each launch decision. An aligned 8-byte
    store is atomic on the platforms we run on, so nobody takes a lock."""

    _FORMAT = "<q"

    def __init__(self, path: str, *, writable: bool = False) -> None:
        if writable and (not os.path.exists(path) or os.path.getsize(path) != 8):
            Path(path).write_bytes(struct.pack(self._FORMAT, 0))
        self._fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self._map = mmap.mmap(self._fd, 8, access=access)

    def read(self) -> int:
        return int(struct.unpack_from(self._FORMAT, self._map, 0)[0])

    def write(self, value: int) -> None:
        struct.pack_into(self._FORMAT, self._map, 0, value)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
