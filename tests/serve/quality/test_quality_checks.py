"""The quality tool's library checks without engines: the results document names its pair, learned routers get
their pair's weights, question files are checked line by line, and a refused server start leaves no run folder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import trserve.quality.run as run
from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trserve.pairs.fill import with_pair_router
from trserve.quality.checks import check_points
from trserve.quality.evalset import load_questions
from trserve.quality.sweep import SweepPoint, grid_points
from trserve.server.defaults import DEFAULT_CONFIG, default_config
from trsim.pairs import load_pair


def test_results_document_records_its_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    @asynccontextmanager
    async def no_server(cfg: ServeConfig) -> AsyncIterator[None]:
        yield None

    async def no_sweep(*args: object, **kwargs: object) -> list[dict[str, object]]:
        return []

    monkeypatch.setattr(run, "resolve_model_path", lambda path: path)
    monkeypatch.setattr(run, "LargeScorer", lambda path: None)
    monkeypatch.setattr(run, "answer_server", no_server)
    monkeypatch.setattr(run, "run_sweep", no_sweep)
    doc = run.measure_quality(default_config(), [], [], max_tokens=4, concurrency=1, command="t", progress=print)
    assert doc["pair"] == "local-smollm2"


def test_measure_quality_refuses_models_without_checkpoints() -> None:
    cfg = default_config(pair="r2r-qwen-1.5b-32b")
    with pytest.raises(ConfigError, match="no checkpoints"):
        run.measure_quality(cfg, [], [], max_tokens=4, concurrency=1, command="t", progress=print)


def test_learned_routers_get_their_pairs_weights() -> None:
    router = str(load_pair("local-smollm2").router_path("r2r"))
    assert with_pair_router("r2r", {"threshold": 0.3}, "local-smollm2") == {"threshold": 0.3, "router": router}
    assert with_pair_router("rstitch", {"tau": 1.0}, "local-smollm2") == {"tau": 1.0}
    check_points(grid_points(["rstitch", "r2r", "citer", "colllm"]), "local-smollm2", 2, "--program")
    with pytest.raises(ConfigError, match=r"--points: r2r .*needs a trained router"):
        check_points([SweepPoint("r2r", "r2r", {"threshold": 0.3})], None, 2, "--points")


@pytest.mark.parametrize("text", ["", "\n\n", '{"id": 1, "prompt": "", "answers": ["x"]}\n'])
def test_empty_question_files_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"--candidates: {path}"):
        load_questions(path, "--candidates")


def test_a_refused_start_leaves_no_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trserve.crossval.harness import crossval_server

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    data = dict(DEFAULT_CONFIG)
    data["models"] = [{**m, "path": str(tmp_path / "missing")} for m in DEFAULT_CONFIG["models"]]
    cfg = ServeConfig.model_validate(data)

    async def start() -> None:
        async with crossval_server(cfg):
            raise AssertionError("started")

    with pytest.raises(ConfigError, match="not a model checkpoint"):
        asyncio.run(start())
    assert list(tmp_path.glob("tokenrouter-crossval-*")) == []
