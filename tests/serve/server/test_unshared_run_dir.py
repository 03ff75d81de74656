"""A worker needs nothing from the front end's run directory on ``tcp``: what a worker placed on another machine
(a Ray node) sees. The front end's run directory is removed before the workers start (they get the run spec from
the spawner, in their own log directory here, through Ray on a cluster); they start, receive their active counts
over ZeroMQ and serve answers equal to the hash engine's reference. (Before the counts travelled as messages, each
worker opened ``RUN_DIR/active`` at start and stopped there.)"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from tests.serve.engine_support import model_dirs
from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import server_config
from trcore import RequestSpec
from trserve.config import ServeConfig
from trserve.engine.hash import hash_next
from trserve.frontend.book import FrontEnd
from trserve.server.launch import Launcher
from trserve.server.serve import resolve, start_frontend

NUM_REQUESTS = 8
MAX_TOKENS = 40


def prompt(i: int) -> list[int]:
    return [300 + 13 * i + k for k in range(3 + i % 4)]


async def serve_without_the_run_dir(tmp_path: Path) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
    cfg = ServeConfig.model_validate(server_config(model_dirs(), backend="hash", transport="tcp"))
    run_dir = tmp_path / "front-end-only"
    run_dir.mkdir()
    spec, workers = resolve(cfg, str(run_dir))
    frontend, metrics = start_frontend(cfg, spec, FrontEnd, cfg.entry_model)
    shutil.rmtree(run_dir)  # the workers' machine has no such directory
    log_dir = tmp_path / "worker-node"
    log_dir.mkdir()
    launcher = Launcher(spec, workers, log_dir, frontend, metrics, cfg.server.restart)
    try:
        await launcher.start_all(60.0)
        gens = {}
        for i in range(NUM_REQUESTS):
            extra = {"handoff_prob": 0.3, "decision_key": f"r{i}"}
            gens[f"r{i}"] = frontend.submit(RequestSpec(f"r{i}", len(prompt(i)), MAX_TOKENS), prompt(i), extra)
        for _ in range(600):
            if all(g.is_done for g in gens.values()):
                break
            await asyncio.sleep(0.05)
        states = await frontend.probe()
        return {rid: list(g.output) for rid, g in gens.items()}, [s.received for s in states]
    finally:
        await launcher.stop_all()
        await frontend.close()


def test_workers_serve_without_the_front_ends_run_directory(tmp_path):
    outputs, received = asyncio.run(serve_without_the_run_dir(tmp_path))
    next_token = lambda model, seq: hash_next(model, seq).token_id  # noqa: E731
    for i in range(NUM_REQUESTS):
        assert outputs[f"r{i}"] == reference(next_token, prompt(i), f"r{i}", MAX_TOKENS, prob=0.3), i
    assert len(received) == 2 and all(r.get("Active", 0) >= 1 for r in received)  # the counts came as messages
