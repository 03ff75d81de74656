"""A killed lockstep driver or per-token dispatcher costs latency, not requests, and not text: the front end resumes
each in-flight request on the model its last step's route named, with that step's routing state (the driver and the
dispatcher report routes as the routed mode's subservers do), so every stream ends with the text of an uninterrupted
run. Before, a resumed request started over on the entry model with fresh routing state and some streams wrote
other tokens.

The kill and the streams are those of ``tests/serve/server/test_restart.py``, on a hash server of each mode."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.serve.engine_support import model_dirs
from tests.serve.server.test_restart import MAX_TOKENS, NUM_STREAMS, streams, wait_healthy
from tests.serve.server_fixtures import Served, server_config, start_served, wait_idle

pytestmark = pytest.mark.serve

DRIVER = 0  # the lockstep driver and the per-token dispatcher are process 0 (engine workers: 1 + model)


@pytest.fixture(scope="module", params=["lockstep", "per-token"])
def baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    dirs = model_dirs()
    config = {**server_config(dirs, backend="hash"), "mode": request.param, "batching": {}}
    yield from start_served(tmp_path_factory.mktemp(f"{request.param}-restart"), config, dirs)


def test_resumed_baseline_requests_write_the_text_of_an_uninterrupted_run(baseline: Served):
    uninterrupted = asyncio.run(streams(baseline))
    assert all(r.status == 200 and not r.errors for r in uninterrupted.streams)
    driver = next(w for w in baseline.state()["workers"] if w["model"] < 0)
    run = asyncio.run(streams(baseline, kill=(driver["pid"], DRIVER)))
    for got, want in zip(run.streams, uninterrupted.streams, strict=True):
        assert got.status == 200 and not got.errors, got.lines[-3:]
        assert got.completion_tokens == want.completion_tokens == MAX_TOKENS["hash"]
        assert got.text == want.text  # continued on the model, and with the routing state, its route named
    assert run.plain == uninterrupted.plain  # the same token ids, all 200
    wait_healthy(baseline)
    with baseline.client() as client:
        metrics = client.get("/metrics").text
    resumed = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("tokenrouter_requests_resumed_total")
    )
    assert resumed >= NUM_STREAMS  # every stream was in flight at the kill
    after = wait_idle(baseline)
    assert all(w["num_resident"] == 0 for w in after["workers"])
