"""The line that says where the server listens is a URL a client can use: an IPv6 host in brackets."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from trserve.config import ServeConfig
from trserve.server.serve import _announce


@pytest.mark.parametrize(("host", "url"), [("::1", "http://[::1]:8123"), ("127.0.0.1", "http://127.0.0.1:8123")])
def test_the_announced_url_brackets_an_ipv6_host(host, url):
    cfg = ServeConfig.model_validate(
        {"backend": "emulated", "models": [{"name": "a", "emulated": {"latency_ms": 1.0}}],
         "server": {"host": host, "port": 8123}}
    )  # fmt: skip
    lines: list[str] = []
    asyncio.run(_announce(SimpleNamespace(started=True, servers=[]), cfg, lines.append))
    assert lines and lines[0].endswith(f" on {url}"), lines
