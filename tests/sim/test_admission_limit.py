"""An open loop's admission limit (``WorkloadConfig.max_active``, a server's ``max_active_requests``): arrivals beyond
it wait in arrival order, their latencies count from arrival, waiting ones count as unfinished; bad values refused."""

from __future__ import annotations

import pytest

from trcore import ConfigError
from trsim import markov_config
from trsim.driver import Simulation
from trsim.lengths import constant
from trsim.workload import WorkloadConfig

STEP_S = 0.010  # one model, every step this long whatever the batch


def config(times=(0.0, 0.0, 0.0, 0.1), max_active=1, **workload):
    """One model at :data:`STEP_S` a step, 3-token answers arriving at ``times``, at most ``max_active`` in flight."""
    wl = WorkloadConfig(arrival="trace", arrival_times_s=times, prompt_tokens=constant(4),
                        output_tokens=constant(3), max_active=max_active, **workload)  # fmt: skip
    return markov_config([[1.0]], None, [STEP_S], [1], 1, wl)


def rounded(times):
    return {rid: tuple(round(t, 9) for t in three) for rid, three in times.items()}


def test_arrivals_beyond_the_limit_wait_in_order_and_their_latency_counts_from_arrival():
    # One at a time: each request takes 3 steps; the two that arrived with s0 start when the one before ends.
    sim = Simulation(config(), record_trace=True)
    result = sim.run()
    assert rounded(sim.request_times) == {
        "s0": (0.0, 0.01, 0.03), "s1": (0.0, 0.04, 0.06), "s2": (0.0, 0.07, 0.09), "s3": (0.1, 0.11, 0.13)
    }  # fmt: skip
    assert result.models[0].batch_histogram == {1: 12}
    two = Simulation(config(max_active=2), record_trace=True)
    two.run()
    assert rounded(two.request_times) == {
        "s0": (0.0, 0.01, 0.03), "s1": (0.0, 0.01, 0.03), "s2": (0.0, 0.04, 0.06), "s3": (0.1, 0.11, 0.13)
    }  # fmt: skip


def test_without_a_limit_every_arrival_is_admitted_at_once():
    sim = Simulation(config(max_active=None), record_trace=True)
    sim.run()
    assert rounded(sim.request_times) == {
        "s0": (0.0, 0.01, 0.03), "s1": (0.0, 0.01, 0.03), "s2": (0.0, 0.01, 0.03), "s3": (0.1, 0.11, 0.13)
    }  # fmt: skip


def test_waiting_arrivals_count_as_unfinished():
    result = Simulation(config()).run(time_s=0.015)  # s0 is running, s1 and s2 wait for its slot
    assert result.num_finished == 0 and result.num_unfinished == 3


def test_poisson_arrivals_never_exceed_the_limit():
    wl = WorkloadConfig(arrival="poisson", rate_per_s=400.0, prompt_tokens=constant(4), output_tokens=constant(20),
                        max_active=3)  # fmt: skip
    result = Simulation(markov_config([[1.0]], None, [STEP_S], [1], 1, wl, seed=3)).run(time_s=2.0)
    assert max(result.models[0].batch_histogram) == 3  # the arrivals outpace the steps: the limit is reached
    assert result.num_unfinished > 100  # about 400 arrivals a second against 150 answers: the wait grows


@pytest.mark.parametrize(("arrival", "limit"), [("trace", 0), ("closed", 4)])
def test_a_limit_below_one_or_on_a_closed_loop_is_refused(arrival, limit):
    times = (0.0,) if arrival == "trace" else ()
    with pytest.raises(ConfigError, match=r"workload\.max_active"):
        WorkloadConfig(arrival=arrival, arrival_times_s=times, max_active=limit)
