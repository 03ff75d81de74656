"""The server one bench system runs on, started for its cells and always stopped: ``tokenrouter serve`` with the
system's config, or vLLM's own OpenAI server for ``vllm-server``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trserve.bench.systems import ThresholdTable, system_config
from trserve.bench.vllm_server import VllmServer
from trserve.server.process import ServerProcess

START_TIMEOUT_S = 900.0


@dataclass
class Started:
    """A running server: its URL and process id, and what it runs."""

    url: str
    pid: int
    #: The routing program and parameters (``{"program", "params"}``); None for a server that does not route.
    router: dict[str, Any] | None
    #: For ``vllm-server``: the command, environment and start-up time.
    description: dict[str, Any] = field(default_factory=dict)


@contextmanager
def started(base: Mapping[str, Any], system: str, router: str, table: ThresholdTable | None) -> Iterator[Started]:
    """Start the server of ``system`` routed by ``router`` (``none``: a single-model system), stop it on exit."""
    if system == "vllm-server":
        vllm = VllmServer(base["models"][-1])
        try:
            vllm.start(timeout_s=START_TIMEOUT_S)
            assert vllm.process is not None
            yield Started(vllm.url, vllm.process.pid, None, vllm.describe())
        finally:
            vllm.stop()
        return
    cfg = system_config(base, system, "rstitch" if router == "none" else router, table)
    path = Path(tempfile.mkstemp(prefix=f"bench-{system}-", suffix=".yaml")[1])
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    server = ServerProcess(path)
    try:
        server.start(timeout_s=START_TIMEOUT_S)
        assert server.process is not None
        yield Started(server.url, server.process.pid, None if system == "llm-only" else dict(cfg["router"]))
    finally:
        server.stop()
        path.unlink(missing_ok=True)
