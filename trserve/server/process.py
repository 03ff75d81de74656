"""Running ``tokenrouter serve`` as a child process: start, wait until healthy, stop (used by demo and tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from trserve.entrypoints import worker_command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A ``tokenrouter serve`` child on 127.0.0.1:``port``; its stderr goes to :attr:`log_path`."""

    def __init__(self, config: Path | None, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.port = port or free_port()
        self.env = {**os.environ, **(env or {})}
        self.log_path = Path(tempfile.mkstemp(prefix="tokenrouter-serve-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 600.0) -> None:
        """Start and wait for ``/health`` to answer 200; raises RuntimeError with the log tail on failure."""
        cmd = worker_command("server", "serve", "--host", "127.0.0.1", "--port", str(self.port))
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(f"server exited with status {code}:\n{self.log_tail()}")
            if self.is_healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def is_healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

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
