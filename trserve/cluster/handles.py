"""What a spawner is given (a launch order) and what it hands back (a handle on a running worker process)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trserve.runtime.placement import Placement

LOG_TAIL_LINES = 30


class ClusterError(RuntimeError):
    """The processes could not be placed (no cluster, resources that never come free); the message says why."""


@dataclass(frozen=True)
class LaunchOrder:
    """Start worker ``index`` (``name``, entry point ``role``) at ``generation`` on ``placement``'s devices, with
    the run spec ``run_json`` (its JSON text: each spawner writes it where the process can read it)."""

    index: int
    name: str
    role: str
    placement: Placement
    generation: int
    run_json: str


class WorkerProcess(Protocol):
    """A running worker process, wherever it runs: the subset of ``subprocess.Popen`` the launcher uses, plus
    where its log is."""

    @property
    def pid(self) -> int:
        """The worker's process id on its node."""
        ...

    @property
    def log_location(self) -> str:
        """Where the worker's log is, for messages (a path; on a cluster prefixed by its node)."""
        ...

    def poll(self) -> int | None:
        """The exit status once it has exited, else None (never blocks)."""
        ...

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM)."""
        ...

    def kill(self) -> None:
        """Stop it now (SIGKILL)."""
        ...

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for its exit status (None if it is still running after ``timeout_s``)."""
        ...

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of its log."""
        ...


class Spawner(Protocol):
    """Places and starts the worker processes of one run."""

    def reserve(self, workers: list[tuple[str, Placement]]) -> None:
        """Reserve devices for every worker (by name and placement, in index order) before any starts; raises
        :class:`ClusterError` when they cannot be had."""
        ...

    def spawn(self, order: LaunchOrder) -> WorkerProcess:
        """Start the process ``order`` describes (a restart passes the next generation of the same index)."""
        ...

    def close(self) -> None:
        """Release what :meth:`reserve` and :meth:`spawn` took (the processes have been stopped)."""
        ...
