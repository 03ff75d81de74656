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


def switch_rate_after_return(traces, window):
    """Share of SLM steps sending the request to the LLM, within ``window`` steps of coming back vs later."""
    near, far = [0, 0], [0, 0]
    for trace in traces:
        since = None
        for step in trace.steps:
            if step.model == 1:
                since = 0
                continue
            bucket = near if since is not None and since < window else far
            bucket[0] += step.destination == 1
            bucket[1] += 1
            since = None if since is None else since + 1
    return near[0] / near[1], far[0] / far[1]


def test_bursty_router_clusters_llm_visits(r2r):
    params = {"P": [[0.8, 0.2], [1.0, 0.0]], "C": [[1.0, 0.0], [1.0, 0.0]], "burst_p": 0.6, "window": 4}
    config = replace(r2r(), router=RouterConfig("bursty", params))
    near, far = switch_rate_after_return(run_traces(config, 20_000), window=4)
    assert near == pytest.approx(0.6, abs=0.03) and far == pytest.approx(0.2, abs=0.03)


def test_markov_router_has_no_such_memory(r2r):
    near, far = switch_rate_after_return(run_traces(r2r(), 20_000), window=4)
    assert near == pytest.approx(far, abs=0.03)


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
