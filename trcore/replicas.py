"""Replicas: several copies of a model, each its own subserver, and the rule that pins a request to one of them.

A run with ``replicas[m]`` copies of model ``m`` has one subserver process per (model, replica), numbered model by
model: model 0's replicas first, then model 1's. With one replica of every model, process ``m`` is model ``m``.

A request is **pinned** to one replica of every model when it is admitted (its KV cache lives on the replicas it
visits), each the replica with the least load: requests ready plus resident there, as the driver sees them, among
the replicas with room for one more pinned request (a replica's engine holds at most its ``max_num_seqs``). The
pins travel with the request (``Request.extra[PIN_KEY]``), so a model hands a request straight to the pinned
replica of its destination. Both drivers (the simulator and the server's front end) use :func:`least_loaded`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trcore.errors import ConfigError

#: ``Request.extra`` key of a request's pins: ``extra[PIN_KEY][m]`` is its replica of model ``m``.
PIN_KEY = "trcore_replicas"


@dataclass(frozen=True)
class ReplicaTable:
    """Process index <-> (model, replica) for ``replicas[m]`` copies of each model ``m``."""

    replicas: tuple[int, ...]
    #: ``first[m]``: the process index of model ``m``'s replica 0.
    first: tuple[int, ...] = field(init=False)
    #: ``procs[p]``: (model, replica) of process ``p``.
    procs: tuple[tuple[int, int], ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.replicas or any(k < 1 for k in self.replicas):
            raise ConfigError("replicas", f"every model needs at least one replica, got {list(self.replicas)}")
        first: list[int] = []
        procs: list[tuple[int, int]] = []
        for m, k in enumerate(self.replicas):
            first.append(len(procs))
            procs.extend((m, r) for r in range(k))
        object.__setattr__(self, "first", tuple(first))
        object.__setattr__(self, "procs", tuple(procs))

    @classmethod
    def single(cls, num_models: int) -> ReplicaTable:
        """One replica of each model (process ``m`` is model ``m``)."""
        return cls((1,) * num_models)

    @property
    def num_models(self) -> int:
        return len(self.replicas)

    @property
    def num_procs(self) -> int:
        return len(self.procs)

    @property
    def pipelines(self) -> int:
        """Independent pipelines the copies make: the fewest copies of any model. With ``k`` of every model, ``N``
        requests run as ``k`` pipelines of ``N / k`` (each replica's threshold table keys on its own share), so
        the adaptive controller solves one pipeline at ``N / pipelines``."""
        return min(self.replicas)

    @property
    def has_replicas(self) -> bool:
        """Whether some model runs more than one copy (else no request needs pins)."""
        return len(self.procs) > len(self.replicas)

    def proc(self, model: int, replica: int = 0) -> int:
        """The process running replica ``replica`` of model ``model``."""
        return self.first[model] + replica

    def model_of(self, proc: int) -> int:
        return self.procs[proc][0]

    def replica_of(self, proc: int) -> int:
        return self.procs[proc][1]

    def procs_of(self, model: int) -> range:
        """The processes running model ``model``'s replicas, replica 0 first."""
        return range(self.first[model], self.first[model] + self.replicas[model])

    def proc_of_request(self, model: int, extra: Mapping[str, Any]) -> int:
        """The process that holds a request (routing state ``extra``) on model ``model``: its pinned replica."""
        if len(self.replicas) == len(self.procs):
            return model
        return self.first[model] + int(extra[PIN_KEY][model])

    def pin(self, loads: Sequence[int], room: Sequence[bool] | None = None) -> tuple[int, ...]:
        """Pins for a new request: per model, :func:`least_loaded` of its replicas (``loads`` by process), among
        those with ``room[p]`` (None: every replica has room)."""
        pins = []
        for m in range(len(self.replicas)):
            procs = self.procs_of(m)
            pins.append(least_loaded([loads[p] for p in procs], None if room is None else [room[p] for p in procs]))
        return tuple(pins)


def least_loaded(loads: Sequence[int], room: Sequence[bool] | None = None) -> int:
    """The replica with the smallest load (requests ready plus resident) among those with ``room`` (all when None,
    or when none has room); the lowest index among equals."""
    candidates = [r for r in range(len(loads)) if room is None or room[r]] or list(range(len(loads)))
    return min(candidates, key=lambda r: (loads[r], r))
