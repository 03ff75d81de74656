"""What a user would run instead of TokenRouter: vLLM's own OpenAI server on the large model alone
(``python -m vllm.entrypoints.openai.api_server``), started and stopped by the bench.

It gets what ``llm-only`` gets: the large model's checkpoint, dtype and ``max_model_len``, every core (the same
placement environment: OpenMP threads bound to all cores, the same KV-cache space), and serves it under the
bench's model name so the same client drives it. Everything else is vLLM's default (its scheduler, block size
and ``torch.compile`` on CPU), as a user would get it. It runs in its own session so stopping it also ends the
engine-core process vLLM starts beside the API server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.entrypoints import worker_command
from trserve.model_config import ModelConfig
from trserve.runtime.placement import place_models
from trserve.runtime.runspec import resolve_model_path
from trserve.server.process import HttpChild

#: The name the bench's client asks for (``"model"`` in every request body).
SERVED_NAME = "tokenrouter"


def vllm_server_args(model: Mapping[str, Any], port: int, extra: Sequence[str] = ()) -> list[str]:
    """vLLM's command-line arguments for ``model`` (a serve config's model entry): only what a user states to serve
    this checkpoint as the bench does (path, dtype, context length, name, address), plus ``extra``."""
    cfg = ModelConfig.model_validate(dict(model))
    if cfg.path is None:
        raise ConfigError("systems", "vllm-server needs a model checkpoint (a config with backend: vllm)")
    return ["--model", resolve_model_path(cfg.path), "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
            *extra]  # fmt: skip


def vllm_server_environment(model: Mapping[str, Any]) -> dict[str, str]:
    """The placement environment ``llm-only`` gives its engine: all cores, the same KV-cache space."""
    return place_models([ModelConfig.model_validate(dict(model))])[0].environment()


class VllmServer(HttpChild):
    """vLLM's OpenAI server as a child on 127.0.0.1:``port``; its output goes to :attr:`log_path`."""

    what = "vLLM's server"

    def __init__(self, model: Mapping[str, Any], port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        super().__init__(port, "vllm-server-")
        self.model = model
        self.extra_args = extra_args
        self.placement_env = vllm_server_environment(model)
        #: Seconds from launch until ``/health`` answered (start-up, including vLLM's compilation).
        self.startup_s: float | None = None

    @property
    def command(self) -> list[str]:
        """vLLM's OpenAI server on the current port."""
        return worker_command("vllm-openai-server", *vllm_server_args(self.model, self.port, self.extra_args))

    def describe(self) -> dict[str, Any]:
        """The command and the environment it ran with, for the bench's JSON."""
        return {"command": " ".join(self.command[1:]), "environment": self.placement_env, "startup_s": self.startup_s}

    def start(self, timeout_s: float = 900.0) -> None:
        """Start and wait until ``/health`` answers 200; a RuntimeError with the log's tail when it does not. A port
        picked here that another process took first is replaced (:meth:`HttpChild.launch_on_a_free_port`)."""
        env = {**os.environ, **self.placement_env}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vLLM's default: the engine core in its own process
        self.startup_s = self.launch_on_a_free_port(lambda: self.command, env, timeout_s, start_new_session=True)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGINT to the server's process group (vLLM shuts its engine core down), SIGKILL to what of the group
        is left after ``timeout_s``; returns the API server's exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGINT)
        graceful = _wait_group(self.process, time.monotonic() + timeout_s)
        if not graceful:
            _signal_group(self.process.pid, signal.SIGKILL)
            _wait_group(self.process, time.monotonic() + 10.0)
        else:
            self.log_path.unlink(missing_ok=True)  # the log stays for a post-mortem of a hung server
        return self.process.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _wait_group(process: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until the API server has exited and no process of its group is left; False at ``deadline``."""
    while time.monotonic() < deadline:
        if process.poll() is not None and not _group_alive(process.pid):
            return True
        time.sleep(0.1)
    return False


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            found.append(int(stat.parent.name))
    return found


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))
