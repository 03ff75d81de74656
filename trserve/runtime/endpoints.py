"""The address table of one server run: where each process binds its inbox, where each one was bound, and the
run's CURVE keys on ``tcp``.

A process binds first and reports its address second: the front end binds before any worker starts (its
address goes into the run spec); a worker binds ``bind_address(index)`` and reports what it got in its
``Ready`` message, and the launcher then tells every peer (``Rewire``), as it does when a worker restarts at a
new address. On ``ipc`` and ``unix`` the addresses are socket files in the run directory and known in advance;
on ``tcp`` each inbox binds a random port on its host: the run's ``host`` (``server.bind_host``), or the process's own
when :data:`BIND_HOST_ENV` is set in its environment (a worker on another node binds its node's address; the
front end's host must be one every node reaches).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from trserve.runtime.transport import FRONTEND, CurveKeys, Mailbox
from trserve.runtime.unix_async import open_mailbox
from trserve.runtime.unix_transport import UnixMailbox

#: Environment variable that overrides the host a worker's ``tcp`` inbox binds (e.g. its node's IP address).
BIND_HOST_ENV = "TOKENROUTER_BIND_HOST"
Transport = Literal["ipc", "tcp", "unix"]


@dataclass(frozen=True)
class Endpoints:
    """The inboxes of one server run: one per worker process and one for the front end (:data:`FRONTEND`).

    In the routed mode process ``m`` serves model ``m``. ``generation[p]`` changes when process ``p``
    restarts (its ``ipc`` socket file is new, so peers drop what they had queued for the dead process);
    ``addresses`` holds the inboxes bound so far, by process index."""

    run_dir: str
    num_procs: int
    generation: tuple[int, ...] = ()
    transport: Transport = "ipc"
    host: str = "127.0.0.1"
    addresses: Mapping[int, str] = field(default_factory=dict)
    keys: CurveKeys | None = None

    def bind_address(self, index: int) -> str:
        """Where process ``index`` binds its inbox (``tcp``: a random port, read back once bound)."""
        if self.transport == "tcp":
            return f"tcp://{os.environ.get(BIND_HOST_ENV) or self.host}:*"
        scheme = "unix" if self.transport == "unix" else "ipc"
        if index == FRONTEND:
            return f"{scheme}://{self.run_dir}/frontend.sock"
        gen = self.generation[index] if self.generation else 0
        return f"{scheme}://{self.run_dir}/proc-{index}-g{gen}.sock"

    def address(self, index: int) -> str | None:
        """Process ``index``'s inbox as bound (``ipc``, ``unix``: also before it binds); None while unknown."""
        known = self.addresses.get(index)
        if known is None and self.transport != "tcp":
            return self.bind_address(index)
        return known

    def inbox(self, index: int) -> str:
        address = self.address(index)
        if address is None:
            raise KeyError(f"process {index} has not reported its address yet")
        return address

    @property
    def frontend(self) -> str:
        return self.inbox(FRONTEND)

    def with_generation(self, index: int, generation: int) -> Endpoints:
        """Process ``index`` restarts as ``generation``: a new inbox, unknown until it reports it."""
        gens = list(self.generation or (0,) * self.num_procs)
        gens[index] = generation
        addresses = {p: a for p, a in self.addresses.items() if p != index}
        return replace(self, generation=tuple(gens), addresses=addresses)

    def with_address(self, index: int, address: str) -> Endpoints:
        """Process ``index`` reported it listens at ``address``."""
        return replace(self, addresses={**self.addresses, index: address})

    def address_book(self) -> dict[int, str]:
        """The known inbox of every process, keyed by process index (front end: :data:`FRONTEND`)."""
        book = {p: self.address(p) for p in (*range(self.num_procs), FRONTEND)}
        return {p: a for p, a in book.items() if a is not None}

    def mailbox(self, index: int) -> Mailbox | UnixMailbox:
        """Process ``index``'s mailbox: its own inbox bound, an outbox to every peer whose address is known
        (messages for the others wait until a ``Rewire`` names their address)."""
        book = self.address_book()
        book.pop(index, None)
        return open_mailbox(self.bind_address(index), book, self.keys)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["addresses"] = {str(p): a for p, a in self.addresses.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Endpoints:
        keys = data.get("keys")
        return cls(
            run_dir=data["run_dir"],
            num_procs=data["num_procs"],
            generation=tuple(data["generation"]),
            transport=data.get("transport", "ipc"),
            host=data.get("host", "127.0.0.1"),
            addresses={int(p): a for p, a in data.get("addresses", {}).items()},
            keys=None if keys is None else CurveKeys(**keys),
        )
