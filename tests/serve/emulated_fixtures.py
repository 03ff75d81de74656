"""Small routed servers on emulated engines for the bench's load-generator tests: 1 / 2 ms steps, started from a
config dict and stopped after the module (``emulated_url``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from trserve.server.process import ServerProcess

#: Hands off about every third token (the R2R-like chain), the small model's token of a hand-off dropped.
MARKOV_ROUTER = {"program": "markov", "params": {"P": [[0.65, 0.35], [1.0, 0.0]], "C": [[1, 0], [1, 0]], "seed": 0}}


def emulated_config(router: dict[str, Any] = MARKOV_ROUTER, **emulated: Any) -> dict[str, Any]:
    """A routed config on emulated engines (small 1 ms, large 2 ms a step); ``emulated``: more settings of both."""
    models = [
        {"name": name, "emulated": {**emulated, "latency_ms": ms}} for name, ms in (("small", 1.0), ("large", 2.0))
    ]
    return {"backend": "emulated", "models": models, "router": router,
            "batching": {"thresholds": [1, 1], "max_wait_ms": 20.0}}  # fmt: skip


def emulated_url(tmp: Path, config: dict[str, Any]) -> Iterator[str]:
    """Serve ``config`` (written under ``tmp``) and yield its URL until the caller is done."""
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    server = ServerProcess(path)
    server.start(timeout_s=300)
    try:
        yield server.url
    finally:
        server.stop()
