"""Session-scoped servers for the server tests: ``tokenrouter serve`` started once, shared by every test.

* ``vllm_server``: the real thing on the local pair (model 0 = large, model 1 = small), float32, routed by the
  ``schedule`` program so each request can carry its own hand-off schedule or hand-off probability;
* ``hash_server``: the same machinery on the hash stand-in engine (starts in seconds), over ``server.transport:
  ipc`` (ZeroMQ);
* ``tcp_hash_server``: ``hash_server`` with ``server.transport: tcp`` (CURVE on every socket); its run specs
  (with the run's keys) are in ``Served.log_dir``;
* ``unix_hash_server``: ``hash_server`` with ``server.transport: unix`` (Unix sockets, no ZeroMQ).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.serve.engine_support import model_dirs
from trserve.server.process import ServerProcess

API_KEY = "test-key"
MODEL = "tokenrouter"
MAX_MODEL_LEN = 512
MAX_ACTIVE = 64
MAX_WAITING = 32
MAX_BODY = 65536


@dataclass
class Served:
    """A running server and what tests need to talk to it."""

    process: ServerProcess
    model_dirs: tuple[str, ...]  # model 0, model 1
    backend: str
    log_dir: Path | None = None  # server.log_dir when the config sets one

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {API_KEY}"}

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=kw.pop("timeout", 300.0), **kw)

    def async_client(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=kw.pop("timeout", 300.0), **kw)

    def state(self, detail: bool = False) -> dict[str, Any]:
        """``/debug/state``: every process's resident requests, KV usage, memory (``detail``: Python objects)."""
        with self.client() as c:
            response = c.get("/debug/state", params={"detail": detail})
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result


def server_config(dirs: tuple[str, ...], backend: str = "vllm", **server: Any) -> dict[str, Any]:
    model = {"dtype": "float32", "max_model_len": MAX_MODEL_LEN, "block_size": 32, "kv_cache_gib": 0.5,
             "max_num_seqs": MAX_ACTIVE}  # fmt: skip
    return {
        "backend": backend,
        "handoff": "session",
        "models": [{"name": "large", "path": dirs[0], **model}, {"name": "small", "path": dirs[1], **model}],
        "router": {"program": "schedule", "params": {"handoff_prob": 0.0, "seed": 0}},
        "batching": {"thresholds": [3, 2], "max_wait_ms": 20.0},  # delayed batching, bounded wait
        "server": {"api_key": API_KEY, "max_active_requests": MAX_ACTIVE, "max_waiting_requests": MAX_WAITING,
                   "max_body_bytes": MAX_BODY, "restart": {"enabled": True, "max_restarts": 2}, **server},
    }  # fmt: skip


@contextlib.contextmanager
def running_server(path: Path, timeout_s: float = 900.0) -> Iterator[ServerProcess]:
    """A started ``tokenrouter serve --config path`` (the test fails with its log's tail when it does not start),
    stopped after the caller is done."""
    process = ServerProcess(path)
    try:
        process.start(timeout_s=timeout_s)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield process
    finally:
        process.stop()


def start_served(tmp: Path, config: dict[str, Any], dirs: tuple[str, ...]) -> Iterator[Served]:
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    log_dir = config["server"].get("log_dir")
    with running_server(path) as process:
        yield Served(process, dirs, config["backend"], Path(log_dir) if log_dir else None)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    large, small = model_dirs()
    dirs = (large, small)
    yield from start_served(tmp_path_factory.mktemp("vllm-server"), server_config(dirs), dirs)


@pytest.fixture(scope="session")
def hash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    large, small = model_dirs()
    dirs = (large, small)
    config = server_config(dirs, backend="hash", transport="ipc")  # ZeroMQ; the default (unix) has its own server
    yield from start_served(tmp_path_factory.mktemp("hash-server"), config, dirs)


@pytest.fixture(scope="session")
def tcp_hash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    large, small = model_dirs()
    dirs = (large, small)
    tmp = tmp_path_factory.mktemp("tcp-server")
    # stream_interval 4: tests/serve/frontend/test_stream_interval.py checks the chunking on this server.
    config = server_config(dirs, backend="hash", transport="tcp", log_dir=str(tmp / "logs"), stream_interval=4)
    yield from start_served(tmp, config, dirs)


@pytest.fixture(scope="session")
def unix_hash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    large, small = model_dirs()
    dirs = (large, small)
    tmp = tmp_path_factory.mktemp("unix-server")
    yield from start_served(tmp, server_config(dirs, backend="hash", transport="unix"), dirs)


def wait_idle(server: Served, timeout_s: float = 30.0) -> dict:
    """Poll until no model holds a request and every KV cache is empty again (the idle baseline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = server.state()
        idle = state["in_flight"] == 0 and all(
            w["num_resident"] == 0 and w["kv_usage"] == 0.0 for w in state["workers"]
        )
        if idle or time.monotonic() > deadline:
            return state
        time.sleep(0.2)
