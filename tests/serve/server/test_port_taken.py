"""A server whose port was picked free but taken by another process before the server bound it (the engines it
starts first open ports of their own, seen in CI as "address already in use") starts again on another port; a
port the caller chose is never swapped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from tests.serve.server.test_emulated_kv import tight_config
from trserve.server import process as process_module
from trserve.server.process import ServerProcess

pytestmark = pytest.mark.serve


def test_a_picked_port_taken_before_the_server_binds_it_is_replaced(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(tight_config("cost")))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, process_module.free_port()])
        monkeypatch.setattr(process_module, "free_port", lambda: next(picks))
        server = ServerProcess(path)
        assert server.port == busy
        try:
            server.start(timeout_s=120)
            assert server.port != busy and server.is_healthy()
        finally:
            server.stop()


def test_a_port_the_caller_chose_is_not_swapped(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(tight_config("cost")))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ServerProcess(path, port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match=f"(?i){process_module.PORT_TAKEN}"):  # one line, "Address ..."
            server.start(timeout_s=120)
        server.stop()
