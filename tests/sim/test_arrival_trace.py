"""Replayed arrival times (``WorkloadConfig(arrival="trace")``) and measured windows (``trsim.windows``): requests
submitted at exactly the given times, exact finish times with a constant latency model, the run's end (drained,
or held to its time limit), a warm-up in seconds, the refusals, and windows pooled as a measurement pools them."""

from __future__ import annotations

import math

import pytest

from trcore import ConfigError
from trsim import markov_config
from trsim.driver import Simulation
from trsim.lengths import LengthPairs, constant
from trsim.windows import Windows, simulate_windows
from trsim.workload import WorkloadConfig

STEP_S = 0.010  # one model, every step this long whatever the batch, B = 1
TIMES = (0.0, 0.0, 0.1, 0.5)


def config(times=TIMES, output=3, **workload):
    """One model at :data:`STEP_S` a step, 4-token prompts and ``output``-token answers arriving at ``times``."""
    wl = WorkloadConfig(arrival="trace", arrival_times_s=times, prompt_tokens=constant(4),
                        output_tokens=constant(output), **workload)  # fmt: skip
    return markov_config([[1.0]], None, [STEP_S], [1], 1, wl)


def test_each_arrival_is_one_request_submitted_at_its_time_and_finishes_exactly():
    # Every step commits one token of each request in the batch: 3 steps from arrival to finish; the two requests
    # at 0 share their steps.
    sim = Simulation(config(), record_trace=True)
    result = sim.run()  # no limit: until the last arrival's request finishes
    assert sim.request_times == {
        "s0": (0.0, 0.01, 0.03), "s1": (0.0, 0.01, 0.03), "s2": (0.1, 0.11, 0.13), "s3": (0.5, 0.51, 0.53)
    }  # fmt: skip
    assert result.num_finished == 4 and result.num_unfinished == 0 and result.committed_tokens == 4 * 3
    assert result.simulated_s == pytest.approx(0.53) and result.models[0].batch_histogram == {1: 6, 2: 3}


def test_a_time_limit_holds_the_run_and_a_warmup_in_seconds_opens_the_window():
    result = Simulation(config()).run(time_s=1.0, warmup_s=0.05)
    assert result.simulated_s == 1.0 and result.num_finished == 4  # idle from 0.53 s to the limit
    assert result.throughput_tok_s == pytest.approx(6 / 0.95)  # the requests at 0.1 and 0.5 s, over [0.05, 1)
    cut = Simulation(config()).run(time_s=0.515)
    assert cut.committed_tokens == 3 + 3 + 3 + 1 and cut.num_unfinished == 1 and cut.num_finished == 3


def test_arrivals_beyond_the_limit_or_past_num_sessions_never_start():
    assert Simulation(config(times=(0.0, 0.2, 5.0))).run(time_s=1.0).num_finished == 2
    sim = Simulation(config(num_sessions=2), record_trace=True)
    assert sim.run().num_finished == 2 and sim.request_times is not None and set(sim.request_times) == {"s0", "s1"}


@pytest.mark.parametrize(
    ("times", "message"),
    [((), "at least one arrival time"), ((0.0, 0.2, 0.1), "must be sorted"), ((-0.1,), "finite and >= 0"),
     ((0.0, math.nan), "finite and >= 0"), ((0.0, math.inf), "finite and >= 0"), (("soon",), "must be numbers")],
)  # fmt: skip
def test_bad_arrival_times_are_refused_naming_the_field(times, message):
    with pytest.raises(ConfigError, match=rf"workload\.arrival_times_s.*{message}"):
        WorkloadConfig(arrival="trace", arrival_times_s=times)


def test_arrival_times_need_the_trace_kind_and_the_warmup_its_limits():
    with pytest.raises(ConfigError, match=r"workload\.arrival_times_s.*'trace' only"):
        WorkloadConfig(arrival="poisson", arrival_times_s=(0.0,))
    assert WorkloadConfig(arrival="trace", arrival_times_s=[0, 1]).arrival_times_s == (0.0, 1.0)
    with pytest.raises(ConfigError, match="warmup_s"):
        Simulation(config()).run(time_s=1.0, warmup_s=1.0)
    with pytest.raises(ConfigError, match="warmup_s"):
        Simulation(config()).run(time_s=1.0, warmup_s=0.1, warmup_tokens=5)


def test_windows_replay_their_own_arrivals_and_pool_as_a_measurement():
    # Window 0: TIMES; window 1: two requests at 0.3 s; window 2: none. Warm-up 0.05 s, measured 0.5 s.
    windows = Windows((TIMES, (0.3, 0.3), ()), warmup_s=0.05, measure_s=0.5)
    result = simulate_windows(config(), windows, record_breakdown=True)
    # In [0.05, 0.55) window 0 commits the 3 tokens of the request at 0.1 s and the 3 of the one at 0.5 s (those
    # at 0 s are warm-up), window 1 its two requests' 6.
    assert result.extra["windows_tok_s"] == pytest.approx([6 / 0.5, 6 / 0.5, 0.0])
    assert result.throughput_tok_s == pytest.approx((12 + 12 + 0) / 3)
    assert result.extra["backlog_at_end"] == [0, 0, 0] and result.num_unfinished == 0
    assert result.num_finished == 6 and result.latency_p50_s == pytest.approx(0.03)  # all by their window's end
    assert result.extra["breakdown"]["num_requests"] == 6 and result.simulated_s == pytest.approx(3 * 0.55)
    inside = simulate_windows(config(), Windows(windows.arrivals, 0.05, 0.5, in_window=True))
    assert inside.num_finished == 4  # the two requests of window 0 that finished at 0.03 s are left out
    with pytest.raises(ConfigError, match="windows"):
        Windows((), 0.0, 1.0)


def test_a_window_cut_by_its_end_leaves_a_backlog():
    windows = Windows(((0.0, 0.52),), warmup_s=0.0, measure_s=0.535)
    result = simulate_windows(config(), windows)
    assert result.extra["backlog_at_end"] == [1] and result.num_finished == 1
    assert result.throughput_tok_s == pytest.approx((3 + 1) / 0.535)


def test_an_arrival_at_or_after_a_windows_end_is_not_replayed_as_the_real_senders_send_none():
    # The bench's and crossval's clients stop sending at the window's end; replayed there, an arrival at exactly
    # the end started as the run stopped and showed as backlog the measurement never had.
    windows = Windows(((0.0, 0.5, 0.535, 0.7),), warmup_s=0.0, measure_s=0.535)
    assert windows.arrivals == ((0.0, 0.5),)
    result = simulate_windows(config(), windows)
    assert result.num_finished == 2 and result.extra["backlog_at_end"] == [0]


def test_pair_offsets_run_each_window_once_per_assignment_of_the_pairs():
    # One window, arrivals at 0 and 0.5 s; pairs write 2, 5 and 9 tokens. Offset 0 gives the arrivals 2 and 5
    # tokens, offset 1 gives them 5 and 9: 7 and 14 tokens over the 1 s window, pooled as two runs.
    pairs = LengthPairs(((4, 2), (4, 5), (4, 9)))
    wl = WorkloadConfig(arrival="trace", arrival_times_s=(0.0, 0.5), pairs=pairs)
    windows = Windows(((0.0, 0.5),), warmup_s=0.0, measure_s=1.0, pair_offsets=(0, 1))
    result = simulate_windows(markov_config([[1.0]], None, [STEP_S], [1], 1, wl), windows)
    assert result.extra["windows_tok_s"] == pytest.approx([7.0, 14.0])
    assert result.throughput_tok_s == pytest.approx(10.5) and result.num_finished == 4
    # End-to-end: 2, 5, 5 and 9 steps of 10 ms: the pooled median between the two middle ones, 50 ms.
    assert result.latency_p50_s == pytest.approx(0.05)
    with pytest.raises(ConfigError, match="pair_offsets"):
        Windows(((0.0,),), 0.0, 1.0, pair_offsets=())
