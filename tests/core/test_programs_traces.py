"""Every routing program in a running multi-model system: no token lost or duplicated, and the recorded
routing trace (trcore.traces format) replays to the same outputs, both by a single-sequence reference and
through the trace-replay router."""

import json

import numpy as np
import pytest

from tests.factories import HashModel, make_arrival, reference_run, run_system
from trcore import PROGRAMS, TraceReplayRouter
from trcore.programs import random_router
from trcore.traces import replay_decisions, trace_from_dict, trace_to_dict, traces_from_events

PROMPTS = [(3, 1, 4), (1, 5), (9, 2, 6, 5), (3, 5, 8, 9, 7), (9,), (3, 2)]
MAX_TOKENS = 24


def program_params(name):
    if name in ("r2r", "citer"):
        return {"router": random_router(np.random.default_rng(5), top_k=4), "threshold": 0.2}  # ~half the tokens
    return {"rstitch": {"tau": 1.0}, "colllm": {"eta": 0.4}, "mixture": {"weights": [0.5, 0.3, 0.2], "seed": 1}}[name]


def build(name):
    num_models = 3 if name == "mixture" else 2
    params = program_params(name)
    return [PROGRAMS.create(name, m, num_models, **params) for m in range(num_models)], num_models


def run(programs, num_models, thresholds=None):
    engines = [HashModel(m) for m in range(num_models)]
    arrivals = [make_arrival(f"r{i}", p, MAX_TOKENS, num_models) for i, p in enumerate(PROMPTS)]
    outputs, subs = run_system(programs, arrivals, engines, thresholds, max_wait_s=2.0)
    events = [e for sub in subs for e in sub.trace]
    by_id = {t.request_id: t for t in traces_from_events(events)}
    return outputs, [by_id[f"r{i}"] for i in range(len(PROMPTS))], engines


@pytest.mark.parametrize("name", ["rstitch", "r2r", "citer", "colllm", "mixture"])
def test_program_trace_replays_to_the_same_outputs(name):
    programs, num_models = build(name)
    outputs, traces, engines = run(programs, num_models, thresholds=[2] * num_models)

    visited = {step.model for trace in traces for step in trace.steps}
    assert visited == set(range(num_models)), "the scenario should exercise every model"
    for i, trace in enumerate(traces):
        # the JSONL form round-trips and the reference, following the trace, commits the same tokens
        trace = trace_from_dict(json.loads(json.dumps(trace_to_dict(trace))), num_models)
        decisions = [(s.destination, s.kept) for s in trace.steps]
        expected, steps = reference_run(engines, PROMPTS[i], decisions, MAX_TOKENS)
        assert outputs[f"r{i}"] == expected
        assert steps == [tuple(s) for s in trace.steps]
        assert trace.num_kept == len(expected)

    replay = [TraceReplayRouter(m, num_models, replay_decisions(traces)) for m in range(num_models)]
    replay_outputs, replay_traces, _ = run(replay, num_models)
    assert replay_outputs == outputs
    assert [t.steps for t in replay_traces] == [t.steps for t in traces]


def test_dropping_programs_record_dropped_steps():
    """R-Stitch's SLM -> LLM switch drops the token: the trace says so, and the LLM step follows it."""
    programs, num_models = build("rstitch")
    _, traces, _ = run(programs, num_models)
    switches = [
        (s, trace.steps[k + 1])
        for trace in traces
        for k, s in enumerate(trace.steps[:-1])
        if s.model == 0 and s.destination == 1
    ]
    assert switches and all(not s.kept and nxt.model == 1 for s, nxt in switches)


def test_a_request_that_outlives_its_trace_goes_on_with_the_next_traces_decisions():
    from trcore import StepResult

    traces = [{0: [(0, True), (0, True)]}, {0: [(0, False)] * 3}, {1: [(0, True)]}]
    router = TraceReplayRouter(0, 2, traces)
    router.assign({})  # another request took trace 0: ours gets trace 1
    kept = [router.route(StepResult(token_ids=[7], request_ids=["r"])).keep[0] for _ in range(9)]
    # Trace 1 (3 dropped tokens), trace 2 has no step on model 0, then trace 0 (2 kept), then trace 1 again.
    assert kept == [False, False, False, True, True, False, False, False, True]
    lonely = TraceReplayRouter(1, 2, [{0: [(0, True)]}])
    assert lonely.route(StepResult(token_ids=[7], request_ids=["s"])).destinations == [1]  # never stepped here
