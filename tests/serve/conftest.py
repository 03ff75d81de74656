"""Fixtures shared by the serve tests (real vLLM on CPU), and the order rule for tests that disturb them."""

import pytest

from tests.serve.kv_fixtures import vllm_small_kv_server
from tests.serve.model_fixtures import local_llm, prepared_pair
from tests.serve.server_fixtures import hash_server, tcp_hash_server, unix_hash_server, vllm_server

__all__ = [
    "hash_server",
    "local_llm",
    "prepared_pair",
    "tcp_hash_server",
    "unix_hash_server",
    "vllm_server",
    "vllm_small_kv_server",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``disruptive`` (they kill processes of the session-wide servers) run after all others, in
    whatever order the rest were collected: the rule is the marker, not a file name."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)
