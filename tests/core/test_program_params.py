"""Routing programs' parameters as a config gives them. A threshold of another type (YAML's ``true``, a number
in quotes) is a config error naming it, not 1 or a TypeError about ``>=``. The trace program's ``traces``: a file
name (the simulator's scenario reads one as ``router.file``, a serve config does not) or malformed decisions are a
config error at start-up, not a server whose every step raises; decisions that travelled as JSON (model keys as
strings) replay as recorded."""

from __future__ import annotations

import json

import pytest

from trcore import StepResult
from trcore.errors import ConfigError
from trcore.program import PROGRAMS


@pytest.mark.parametrize(
    "traces",
    ["traces.jsonl", [], ["x"], [{0: [[5, True]]}], [{3: [[0, True]]}], [{0: [[0]]}], [None]],
)
def test_traces_that_are_no_recorded_decisions_are_a_config_error(traces):
    with pytest.raises(ConfigError, match=r"^trace\.traces: "):
        PROGRAMS.create("trace", 0, 2, traces=traces)


def test_decisions_read_back_from_json_replay_on_their_model():
    """A serve config reaches its workers as JSON (trserve.runtime.runspec), where model 0's key is "0"."""
    recorded = [{0: [(1, False)], 1: [(0, True)]}]
    travelled = json.loads(json.dumps(recorded))
    program = PROGRAMS.create("trace", 0, 2, traces=travelled)
    routing = program.route(StepResult(token_ids=[7], request_ids=["r"]))
    assert routing.destinations == [1] and list(routing.keep or []) == [False]


ROUTER = "models/local-smollm2/routers/r2r.npz"


@pytest.mark.parametrize(
    ("program", "params", "field"),
    [
        ("rstitch", {"tau": True}, "rstitch.tau"),
        ("rstitch", {"tau": "4.0"}, "rstitch.tau"),
        ("rstitch", {"tau": 4.0, "tau_back": [0.0]}, "rstitch.tau_back"),
        ("colllm", {"eta": True}, "colllm.eta"),
        ("colllm", {"eta": "0.5"}, "colllm.eta"),
        ("r2r", {"router": ROUTER, "threshold": "0.5"}, "r2r.threshold"),
    ],
)
def test_a_threshold_of_another_type_is_a_config_error_naming_it(program, params, field):
    with pytest.raises(ConfigError, match=rf"^{field}: must be .*, got "):
        PROGRAMS.create(program, 0, 2, **params)
