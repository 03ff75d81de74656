"""Fixtures shared by the serve tests (real vLLM on CPU)."""

from tests.serve.model_fixtures import local_llm, prepared_pair
from tests.serve.server_fixtures import hash_server, vllm_server

__all__ = ["hash_server", "local_llm", "prepared_pair", "vllm_server"]
