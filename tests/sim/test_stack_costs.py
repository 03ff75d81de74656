"""The serving stack's own costs in the simulator: a per-model host overhead after every step and a per-model
hand-off transfer delay, checked against hand-computed timelines."""

from dataclasses import replace

import pytest

from trcore import BatchingPolicy, ConfigError
from trsim import RouterConfig, SimConfig, simulate
from trsim.driver import Simulation
from trsim.latency import ConstantModel
from trsim.lengths import constant
from trsim.workload import WorkloadConfig

L, H = 0.010, 0.002  # step latency and host overhead of the single model


def one_model(concurrency: int, output: int, overhead: float = H, **workload: object) -> SimConfig:
    wl = WorkloadConfig(concurrency=concurrency, prompt_tokens=constant(3), output_tokens=constant(output), **workload)
    return SimConfig(
        (ConstantModel(L),),
        (BatchingPolicy(1),),
        RouterConfig("markov", {"P": [[1.0]]}),
        wl,
        host_overhead_s=(overhead,),
    )


def test_one_request_at_a_time_costs_latency_plus_overhead_per_token():
    # N = 1, k = 5 tokens: token j is out at j L + (j - 1) H; the next request arrives with the last token and
    # waits out the overhead, so every request after the first takes k (L + H) from arrival to its end.
    result = simulate(one_model(concurrency=1, output=5), tokens=400)
    assert result.simulated_s == pytest.approx(400 * L + 399 * H)
    assert result.latency_p50_s == pytest.approx(5 * (L + H))
    assert result.ttft_p50_s == pytest.approx(H + L)
    assert result.tpot_p50_s == pytest.approx(L + H)
    assert result.models[0].busy_fraction == pytest.approx(L / (L + H), rel=1e-3)  # busy: engine time only


def test_throughput_scales_with_the_step_cycle():
    # N = 4 at threshold 1: one step of all four every L + H.
    result = simulate(one_model(concurrency=4, output=1000), tokens=4000)
    assert result.throughput_tok_s == pytest.approx(4 / (L + H), rel=1e-3)
    assert result.models[0].batch_histogram == {4: 1000}


def test_zero_overhead_is_the_ideal_stack():
    ideal = simulate(replace(one_model(concurrency=4, output=7), host_overhead_s=()), tokens=2000)
    zero = simulate(one_model(concurrency=4, output=7, overhead=0.0), tokens=2000)
    assert zero.simulated_s == ideal.simulated_s == pytest.approx(2000 / 4 * L)


def test_closed_loop_clients_come_back_after_their_think_time():
    # N = 1, 5 tokens of 10 ms per request, the next request 3 ms after one ends: 80 requests in 80 x 50 ms plus
    # 79 pauses.
    config = replace(one_model(concurrency=1, output=5, overhead=0.0, think_time_s=0.003))
    result = simulate(config, tokens=400)
    assert result.simulated_s == pytest.approx(80 * 5 * L + 79 * 0.003)
    assert result.latency_p50_s == pytest.approx(5 * L)  # the pause is the client's, not the request's


def alternating(delays: tuple[float, float], overheads: tuple[float, float]) -> SimConfig:
    """One request of 6 tokens alternating model 0 (10 ms) and model 1 (20 ms), every token kept."""
    traces = [{0: [(1, True)] * 3, 1: [(0, True)] * 3}]
    wl = WorkloadConfig(concurrency=1, num_sessions=1, prompt_tokens=constant(1), output_tokens=constant(6))
    return SimConfig(
        (ConstantModel(0.01), ConstantModel(0.02)),
        (BatchingPolicy(1), BatchingPolicy(1)),
        RouterConfig("trace", {"traces": traces}),
        wl,
        transfer_delay_s=delays,
        host_overhead_s=overheads,
    )


def test_each_hand_off_travels_the_delay_of_the_model_it_goes_to():
    # Steps 0, 1, 0, 1, 0, 1: three hand-offs to model 1 (3 ms each), two to model 0 (1 ms each), and the new
    # request's own way to model 0, the entry model (1 ms).
    result = simulate(alternating((0.001, 0.003), (0.0, 0.0)))
    assert result.num_finished == 1
    assert result.latency_p50_s == pytest.approx(3 * 0.01 + 3 * 0.02 + 3 * 0.003 + 3 * 0.001)


def test_a_new_request_travels_the_entry_models_delay_before_its_first_step():
    # Entering on model 1 (3 ms away): its first step launches 3 ms after submission, its first token 20 ms later.
    sim = Simulation(replace(alternating((0.001, 0.003), (0.0, 0.0)), entry_model=1), record_trace=True)
    result = sim.run()
    assert sim.request_times is not None and result.num_finished == 1
    ((submitted, first, done),) = sim.request_times.values()
    assert first - submitted == pytest.approx(0.003 + 0.02)
    assert done - submitted == pytest.approx(3 * 0.02 + 3 * 0.01 + 3 * 0.003 + 3 * 0.001)  # 1, 0, 1, 0, 1, 0


def test_the_clients_send_lag_comes_before_the_entry_models_delay_and_counts_in_the_latency():
    sim = Simulation(replace(alternating((0.001, 0.003), (0.0, 0.0)), send_lag_s=0.005), record_trace=True)
    result = sim.run()
    assert sim.request_times is not None and result.num_finished == 1
    ((submitted, first, done),) = sim.request_times.values()
    assert submitted == 0.0 and first == pytest.approx(0.005 + 0.001 + 0.01)  # lag, transit to model 0, a step
    assert done == pytest.approx(0.005 + 3 * 0.01 + 3 * 0.02 + 3 * 0.003 + 3 * 0.001)


def test_a_steps_hand_offs_leave_before_its_overhead():
    # Each model waits for the other's hand-off longer than its own overhead, so the overhead never delays
    # the request: hand-offs leave when the step's latency has passed.
    result = simulate(alternating((0.001, 0.003), (0.004, 0.008)))
    assert result.latency_p50_s == pytest.approx(3 * 0.01 + 3 * 0.02 + 3 * 0.003 + 3 * 0.001)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("host_overhead_s", (-0.001,)),
        ("host_overhead_s", (0.001, 0.001)),
        ("host_overhead_s", (float("nan"),)),
        ("transfer_delay_s", -1.0),
        ("transfer_delay_s", (0.001, 0.002)),
        ("transfer_delay_s", float("inf")),
        ("send_lag_s", -0.001),
        ("send_lag_s", float("nan")),
    ],
)
def test_bad_costs_are_refused(field, value):
    with pytest.raises(ConfigError, match=field):
        replace(one_model(concurrency=1, output=5), **{field: value})
