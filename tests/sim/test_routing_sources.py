"""Routing sources in the simulator: state-dependent synthetic programs and synthesized signals."""

from dataclasses import replace

import pytest

from trcore import ConfigError
from trcore.routing_stats import estimate_routing_stats
from trcore.traces import traces_from_events
from trsim import RouterConfig, Simulation, simulate
from trsim.signals import StepSynthesizer, _top2


def run_traces(config, tokens):
    sim = Simulation(config, record_trace=True)
    sim.run(tokens=tokens)
    return traces_from_events(e for s in sim.subservers for e in s.trace)


def switch_rates(traces, window):
    """Share of SLM steps that go to the LLM: inside the window after a calm-time LLM visit, and outside."""
    inside, outside = [0, 0], [0, 0]
    for trace in traces:
        left, burst_visit = 0, False
        for step in trace.steps:
            if step.model == 1:
                continue
            bucket = inside if left > 0 else outside
            bucket[0] += step.destination == 1
            bucket[1] += 1
            leaving = step.destination == 1
            in_burst = left > 0
            left = max(left - 1, 0)
            if leaving:
                burst_visit = in_burst
                left = left if burst_visit else window  # the window opens when the request is back
    return inside[0] / inside[1], outside[0] / outside[1]


def test_bursty_router_clusters_llm_visits(r2r):
    params = {"P": [[0.9, 0.1], [1.0, 0.0]], "C": [[1.0, 0.0], [1.0, 0.0]], "burst_p": 0.5, "window": 6}
    config = replace(r2r(), router=RouterConfig("bursty", params))
    traces = run_traces(config, 20_000)
    inside, outside = switch_rates(traces, window=6)
    assert inside == pytest.approx(0.5, abs=0.03) and outside == pytest.approx(0.1, abs=0.02)
    stats = estimate_routing_stats(traces, 2)
    # not geometric: far more one-step SLM runs than a memoryless router with the same P would give
    assert stats.run_lengths[0].fraction(1) > 1.5 * stats.P[0][1]


def test_markov_router_has_no_such_memory(r2r):
    traces = run_traces(r2r(), 15_000)
    inside, outside = switch_rates(traces, window=4)
    assert inside == pytest.approx(outside, abs=0.03)
    stats = estimate_routing_stats(traces, 2)
    assert stats.run_lengths[0].fraction(1) == pytest.approx(stats.P[0][1], abs=0.02)


def test_regime_state_travels_with_the_request(r2r):
    # Only the hard regime visits the LLM. Were the regime not carried to the LLM, it would route with the
    # easy row there ([1, 0]: always back); carried, it mostly stays (hard row: 0.8).
    params = {
        "P_easy": [[1.0, 0.0], [1.0, 0.0]],
        "P_hard": [[0.5, 0.5], [0.2, 0.8]],
        "p_to_hard": 0.05,
        "p_to_easy": 0.05,
    }
    traces = run_traces(replace(r2r(), router=RouterConfig("regime", params)), 20_000)
    stats = estimate_routing_stats(traces, 2)
    assert 0.65 < stats.P[1][1] < 0.8
    assert 0.05 < stats.P[0][1] < 0.5


def test_rstitch_runs_on_synthesized_entropy(r2r):
    config = replace(r2r(), router=RouterConfig("rstitch", {"tau": 0.4, "tau_back": 0.2}))
    result = simulate(config, tokens=5000)
    assert 0 < result.handoffs_per_token < 1


def test_unsynthesizable_signals_are_refused():
    import random

    from trsim.signals import SignalConfig

    with pytest.raises(ConfigError, match="cannot synthesize signals \\['hidden'\\]"):
        StepSynthesizer(frozenset({"token_ids", "hidden"}), SignalConfig(), random.Random(0))


def test_top2_logprobs_match_the_entropy():
    import math

    lp = _top2(0.3)
    probs = [math.exp(v) for v in lp.values()]
    assert sum(probs) == pytest.approx(1.0)
    assert -sum(p * math.log(p) for p in probs) == pytest.approx(0.3, abs=1e-6)


def test_unknown_program_and_bad_params_are_config_errors(r2r):
    with pytest.raises(ConfigError, match="unknown routing program 'nope'"):
        Simulation(replace(r2r(), router=RouterConfig("nope")))
    with pytest.raises(ConfigError, match=r"router\.P"):
        Simulation(replace(r2r(), router=RouterConfig("bursty", {"P": [[0.5, 0.6], [1, 0]]})))
