"""Routing traces: grouping recorded events, the JSONL form, replay decisions, and trace files."""

import json

import pytest

from trcore import ConfigError, RouteEvent
from trcore.traces import (
    RequestTrace,
    TraceStep,
    check_trace,
    replay_decisions,
    trace_from_dict,
    trace_to_dict,
    traces_from_events,
)
from trsim.tracefile import read_traces, write_traces


def test_events_from_several_models_group_per_request_in_time_order():
    model0 = [RouteEvent("a", 0, 1, False, 1.0), RouteEvent("b", 0, 0, True, 1.0), RouteEvent("a", 0, 0, True, 3.0)]
    model1 = [RouteEvent("a", 1, 0, True, 2.0)]
    traces = traces_from_events([*model1, *model0])
    assert [t.request_id for t in traces] == ["a", "b"]
    assert traces[0].steps == (TraceStep(0, 1, False), TraceStep(1, 0, True), TraceStep(0, 0, True))
    assert traces[0].num_kept == 2 and traces[0].output_length == 2


def test_replay_decisions_split_each_trace_by_model():
    trace = RequestTrace("a", (TraceStep(0, 1, False), TraceStep(1, 0, True), TraceStep(0, 0, True)))
    assert replay_decisions([trace]) == [{0: [(1, False), (0, True)], 1: [(0, True)]}]


def test_dict_form_round_trips_through_json():
    trace = RequestTrace("r7", (TraceStep(0, 1, False), TraceStep(1, 0, True)), 12, 1)
    obj = json.loads(json.dumps(trace_to_dict(trace)))
    assert obj == {"request_id": "r7", "steps": [[0, 1, 0], [1, 0, 1]], "num_prompt_tokens": 12, "num_output_tokens": 1}
    assert trace_from_dict(obj, 2) == trace


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ([1, 2], "t"),
        ({"steps": [[0, 0, 1]]}, "t.request_id"),
        ({"request_id": "r", "steps": "x"}, "t.steps"),
        ({"request_id": "r", "steps": [[0, 0]]}, "t.steps[0]"),
        ({"request_id": "r", "steps": [[0, 0, 2]]}, "t.steps[0]"),
        ({"request_id": "r", "steps": [[0, 5, 1]]}, "t.steps[0]"),
        ({"request_id": "r", "steps": [[0, 1, 1], [0, 0, 1]]}, "t.steps[1]"),
        ({"request_id": "r", "steps": [[0, 0, 1]], "num_output_tokens": -1}, "t.num_output_tokens"),
    ],
)
def test_malformed_traces_name_the_field(obj, field):
    with pytest.raises(ConfigError) as err:
        trace_from_dict(obj, 2, where="t")
    assert err.value.field == field


def test_empty_trace_is_rejected():
    with pytest.raises(ConfigError):
        check_trace(RequestTrace("r", ()))


def test_trace_files_jsonl_and_json(tmp_path):
    traces = [RequestTrace(f"r{i}", (TraceStep(0, 1, False), TraceStep(1, 0, True))) for i in range(3)]
    jsonl = tmp_path / "t.jsonl"
    assert write_traces(jsonl, traces) == 3
    assert read_traces(jsonl, 2) == traces
    as_list = tmp_path / "t.json"
    as_list.write_text(json.dumps([trace_to_dict(t) for t in traces]))
    assert read_traces(as_list) == traces


def test_bad_trace_file_names_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"request_id": "a", "steps": [[0, 0, 1]]}\n{"request_id": "b", "steps": [[0, 0\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2"):
        read_traces(path)
    path.write_text('{"request_id": "a", "steps": [[0, 3, 1]]}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1.steps\[0\]"):
        read_traces(path, 2)
