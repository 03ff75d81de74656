"""``batching.thresholds: adaptive`` through the whole server on the hash engine (starts in seconds): the answers
are the reference's (a re-tune restarts nothing), the controller's window fills from the step reports, and
``/metrics`` and ``/debug/state`` show the thresholds in force, the learned P and C, predicted and measured
throughput."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.serve.engine_support import model_dirs
from tests.serve.server.test_tcp import NUM_STREAMS, answers, expected_tokens
from tests.serve.server_fixtures import Served, server_config, start_served

ADAPTIVE = {"window_s": 2.0, "tick_s": 0.25, "min_steps": 20, "min_interval_s": 0.5, "solve_interval_s": 0.5}


@pytest.fixture(scope="module")
def adaptive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    dirs = model_dirs()
    config = server_config(dirs, backend="hash")
    config["batching"] = {"thresholds": "adaptive", "max_wait_ms": 20.0, "adaptive": {**ADAPTIVE, "initial": [3, 2]}}
    yield from start_served(tmp_path_factory.mktemp("adaptive-server"), config, dirs)


def test_adaptive_server_answers_and_shows_its_controller(adaptive_server: Served):
    for _ in range(3):  # a few rounds, so the controller has windows to decide on while requests run
        assert asyncio.run(answers(adaptive_server)) == [expected_tokens(i) for i in range(NUM_STREAMS)]
    # A tick after the traffic solves at the latest. The window itself empties once window_s (2 s) passes without
    # a request step (58ba5ba), which a loaded machine reaches before a fixed sleep ends: the last solve stays.
    adaptive, deadline = adaptive_server.state()["adaptive"], time.monotonic() + 10.0
    while adaptive is not None and adaptive["last_retune"] is None and time.monotonic() < deadline:
        time.sleep(0.2)
        adaptive = adaptive_server.state()["adaptive"]
    assert adaptive is not None and adaptive["last_retune"] is not None, adaptive  # the window held enough steps
    inputs = adaptive["last_retune"]["inputs"]
    assert inputs["num_steps"][0] > 0 and inputs["num_steps"][1] > 0
    assert inputs["P"][0][1] == pytest.approx(0.3, abs=0.1)  # the schedule program's hand-off probability
    for _ in range(5):  # the window empties after the traffic, so a switch may land between two reads
        before = adaptive_server.state()["adaptive"]["thresholds"]
        with adaptive_server.client() as client:
            text = client.get("/metrics").text
        if adaptive_server.state()["adaptive"]["thresholds"] == before:
            break
    for name in ("thresholds", "p", "c", "predicted_tok_s", "measured_tok_s", "switches_total"):
        assert f"tokenrouter_adaptive_{name}" in text, name
    lines = [line for line in text.splitlines() if line.startswith("tokenrouter_adaptive_thresholds{")]
    assert f'tokenrouter_adaptive_thresholds{{model="large"}} {float(before[0])}' in lines, (before, lines)


def test_adaptive_thresholds_are_not_set_by_hand(adaptive_server: Served):
    """The controller owns the vector: ``PUT /admin/thresholds`` is refused (409) instead of being overridden at
    its next decision; ``GET`` says where the vector in force comes from."""
    with adaptive_server.client() as client:
        got = client.get("/admin/thresholds").json()
        refused = client.put("/admin/thresholds", json={"thresholds": [1, 1]})
    assert got["source"] == "adaptive" and len(got["thresholds"]) == 2
    assert refused.status_code == 409 and refused.json()["error"]["param"] == "thresholds"
    assert "adaptive" in refused.json()["error"]["message"]


def test_threshold_tables_beside_adaptive_are_refused_naming_the_field():
    """The controller's vector, sent to every worker as it connects, replaces tables: given ones never ran."""
    from trcore import ConfigError
    from trserve.config import load_config
    from trserve.server.thresholds import resolve_thresholds

    cfg = load_config("configs/emulated-r2r-a100.yaml")
    tabled = cfg.model_copy(update={"batching": cfg.batching.model_copy(update={"tables": [{4: 3}, {}]})})
    assert resolve_thresholds(tabled) == [1, 1]  # with thresholds [1, 1] the tables run
    adaptive = tabled.batching.model_copy(update={"thresholds": "adaptive"})
    with pytest.raises(ConfigError, match=r"^batching\.tables: thresholds: adaptive"):
        resolve_thresholds(tabled.model_copy(update={"batching": adaptive}))


def test_an_empty_initial_vector_is_refused_not_read_as_the_default():
    """``initial: []`` ran as all 1, unsaid, where ``thresholds: []`` is refused: a vector of the wrong length."""
    from trcore import ConfigError
    from trserve.config import AdaptiveThresholdsConfig, load_config
    from trserve.server.thresholds import resolve_thresholds

    cfg = load_config("configs/emulated-r2r-a100.yaml")
    for initial, expected in ((None, [1, 1]), ([2, 3], [2, 3])):
        batching = cfg.batching.model_copy(
            update={"thresholds": "adaptive", "adaptive": AdaptiveThresholdsConfig(initial=initial)}
        )
        assert resolve_thresholds(cfg.model_copy(update={"batching": batching})) == expected
    batching = cfg.batching.model_copy(
        update={"thresholds": "adaptive", "adaptive": AdaptiveThresholdsConfig(initial=[])}
    )
    with pytest.raises(ConfigError, match=r"^batching\.adaptive\.initial: needs one threshold per model \(2\)"):
        resolve_thresholds(cfg.model_copy(update={"batching": batching}))
