"""Running ``tokenrouter serve`` as a child process: start, wait until healthy, stop (used by demo and tests)."""

from __future__ import annotations

import abc
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from trserve.entrypoints import worker_command

#: What a server's log says (in any case) when its port was taken before it could bind it.
PORT_TAKEN = "address already in use"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpChild(abc.ABC):
    """A server child process on 127.0.0.1:``port`` whose output goes to :attr:`log_path`: launch it and poll its
    ``/health`` until it answers 200 (the shared part of :class:`ServerProcess` and the bench's vLLM server)."""

    #: How the child is named in errors.
    what = "server"

    def __init__(self, port: int | None, log_prefix: str) -> None:
        self.port = port or free_port()
        #: The port was picked here, free when picked: another process may take it before the child binds it
        #: (engines that start first open ports of their own), so a start may retry on another one.
        self.picked_port = port is None
        self.log_path = Path(tempfile.mkstemp(prefix=log_prefix, suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch_and_wait(self, cmd: list[str], env: dict[str, str], timeout_s: float, **popen: Any) -> float:
        """Start ``cmd`` and wait until ``/health`` answers 200; returns the seconds it took. Raises RuntimeError with
        the log's tail when the child exits first, or (after stopping it) when ``timeout_s`` passes."""
        launched = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, **popen)
        while time.monotonic() < launched + timeout_s:
            if (code := self.process.poll()) is not None:
                raise RuntimeError(f"{self.what} exited with status {code}:\n{self.log_tail()}")
            if self.is_healthy():
                return time.monotonic() - launched
            time.sleep(0.5)
        tail = self.log_tail()  # before stop(), which removes the log of a server that stopped cleanly
        self.stop()
        raise RuntimeError(f"{self.what} not healthy after {timeout_s:.0f} s:\n{tail}")

    def launch_on_a_free_port(
        self, command: Callable[[], list[str]], env: dict[str, str], timeout_s: float, attempts: int = 3, **popen: Any
    ) -> float:
        """:meth:`launch_and_wait` with ``command()`` for the current port; a port picked here that another process
        took before the child bound it is replaced, up to ``attempts`` tries (a port the caller chose never is)."""
        for attempt in range(1, attempts + 1):
            try:
                return self.launch_and_wait(command(), env, timeout_s, **popen)
            except RuntimeError as exc:
                if not self.picked_port or PORT_TAKEN not in str(exc).lower() or attempt == attempts:
                    raise
                self.port = free_port()
        raise ValueError(f"attempts must be at least 1, not {attempts}")

    def is_healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @abc.abstractmethod
    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Stop the child; its exit status (None if it never started)."""


class ServerProcess(HttpChild):
    """A ``tokenrouter serve`` child on 127.0.0.1:``port``; its stderr goes to :attr:`log_path`."""

    def __init__(self, config: Path | None, port: int | None = None, env: dict[str, str] | None = None) -> None:
        super().__init__(port, "tokenrouter-serve-")
        self.config = config
        self.env = {**os.environ, **(env or {})}

    def start(self, timeout_s: float = 600.0, attempts: int = 3) -> None:
        """Start and wait for ``/health`` to answer 200; raises RuntimeError with the log tail on failure. A port
        picked here that another process took before the server bound it is replaced, up to ``attempts`` tries."""
        self.launch_on_a_free_port(lambda: self.command, self.env, timeout_s, attempts)

    @property
    def command(self) -> list[str]:
        """``tokenrouter serve`` on the current port."""
        cmd = worker_command("server", "serve", "--host", "127.0.0.1", "--port", str(self.port))
        return cmd if self.config is None else [*cmd, "--config", str(self.config)]

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGINT (graceful: workers are shut down in order), then SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()  # the log stays for a post-mortem
        self.log_path.unlink(missing_ok=True)
        return code
