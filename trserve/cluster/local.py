"""Worker processes on this machine: ``subprocess.Popen`` with the placement's CPU affinity and environment (the
default spawner; no Ray)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from trserve.cluster.handles import LOG_TAIL_LINES, LaunchOrder
from trserve.entrypoints import worker_command
from trserve.runtime.placement import Placement


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ("(no log)" if it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable only by this user (a run spec holds the run's CURVE secret keys on tcp)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def start_worker(order: LaunchOrder, run_json: Path, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``order``'s worker reading ``run_json``, pinned to its placement's cores, appending to ``log_path``
    (shared by the local spawner and the Ray actor that starts a worker on its node)."""
    cpus = set(order.placement.cpus)
    with open(log_path, "ab") as logf:  # the child keeps its own descriptor
        logf.write(f"--- start {order.name} generation {order.generation} at {time.ctime()}\n".encode())
        logf.flush()
        return subprocess.Popen(
            worker_command(order.role, str(run_json), str(order.index)),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**env, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # Ctrl-C reaches the front end only, which shuts workers down in order
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )


class LocalProcess:
    """A worker process on this machine (a ``Popen`` and its log file)."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_location(self) -> str:
        return str(self.log_path)

    def poll(self) -> int | None:
        return self.process.poll()

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)


class LocalSpawner:
    """Starts every worker on this machine; run specs and logs go to ``log_dir``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir

    def reserve(self, workers: list[tuple[str, Placement]]) -> None:
        """Nothing to reserve: :func:`trserve.runtime.placement.place_models` already checked the cores."""

    def spawn(self, order: LaunchOrder) -> LocalProcess:
        run_json = self.log_dir / f"run-{order.index}-g{order.generation}.json"
        write_private(run_json, order.run_json)
        log_path = self.log_dir / f"{order.name}.log"
        env = {**os.environ, **order.placement.environment()}
        return LocalProcess(start_worker(order, run_json, log_path, env), log_path)

    def close(self) -> None:
        """Nothing held beyond the processes."""
