"""Session fixtures for tests that need the local model pair (registered in tests/serve/conftest.py).

* ``prepared_pair``: ``(large_dir, small_dir)``, built once by ``tokenrouter models prepare`` logic if missing
  or stale (into ``$TOKENROUTER_DATA_DIR`` or ``~/.cache/tokenrouter``; first build ~2 min on a quiet machine,
  later sessions ~1 s).
* ``local_llm``: ``local_llm("large")`` / ``local_llm("small")`` -> a started in-process ``vllm.LLM`` (float32,
  block 32, 256 MiB KV, max_model_len 512), one per model per session, shut down at session end. In-process
  engines are what make vLLM reliable under pytest here: see ``trserve.engine.local_llm``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def prepared_pair() -> tuple[Path, Path]:
    from trserve.modelprep.pair import prepare_pair

    # Unlike trserve.modelprep.pair.prepared_pair, rebuild a model made from an older recipe: tests check this code's.
    result = prepare_pair(verify=False, report=lambda _msg: None)
    return result.large, result.small


@pytest.fixture(scope="session")
def local_llm(prepared_pair: tuple[Path, Path]) -> Iterator[Callable[[str], Any]]:
    from trserve.engine.local_llm import shutdown_local_llm, start_local_llm

    dirs = dict(zip(("large", "small"), prepared_pair, strict=True))
    engines: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in engines:
            engines[name] = start_local_llm(str(dirs[name]))
        return engines[name]

    yield get
    for llm in engines.values():
        shutdown_local_llm(llm)
