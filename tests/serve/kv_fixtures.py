"""The real pair served with KV caches barely larger than one request's context (registered in conftest.py):
``vllm_small_kv_server`` holds 17 blocks of 32 tokens on the large model and 18 on the small one, so a few
concurrent requests with hand-offs already spill parked sessions and preempt waiting ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serve.engine_support import model_dirs
from tests.serve.server_fixtures import Served, server_config, start_served

#: vLLM's blocks for these sizes (float32; the large model keeps 46,080 bytes of KV per token, the small one
#: 15,360): 18 and 19, one of each the block pool's null block; both hold at least max_model_len (512) tokens.
SMALL_KV_GIB = (0.026, 0.009)


@pytest.fixture(scope="session")
def vllm_small_kv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    large, small = model_dirs()
    dirs = (large, small)
    config = server_config(dirs)
    for model, gib in zip(config["models"], SMALL_KV_GIB, strict=True):
        model["kv_cache_gib"] = gib
    yield from start_served(tmp_path_factory.mktemp("vllm-small-kv"), config, dirs)
