"""Fixtures shared by the serve tests (real vLLM on CPU)."""

from tests.serve.model_fixtures import local_llm, prepared_pair

__all__ = ["local_llm", "prepared_pair"]
