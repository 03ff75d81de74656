"""Latency breakdowns: hand-made timelines split into parts that add up, and the simulator's own timelines."""

import pytest

from trcore import RouteEvent
from trcore.errors import ConfigError
from trsim import Simulation
from trsim.breakdown import Timeline, breakdown, compare, of_requests, part_names, summarize, timelines_from


def _r2r_timeline() -> Timeline:
    """Submitted at 0; model 0 commits the first token, then hands one to model 1, which hands back; done at 70 ms."""
    steps = (
        RouteEvent("a", 0, 0, True, 0.016, 0.010),
        RouteEvent("a", 0, 1, False, 0.026, 0.020),
        RouteEvent("a", 1, 0, True, 0.058, 0.030),
        RouteEvent("a", 0, -1, True, 0.066, 0.060),
    )
    return Timeline("a", 0.0, 0.017, 0.070, steps)


def test_hand_made_timeline_splits_exactly():
    parts = breakdown(_r2r_timeline(), 2)
    assert parts.to_first_launch == pytest.approx(0.010)
    assert parts.queue == pytest.approx([0.004, 0.0])
    assert parts.handoff == pytest.approx([0.002, 0.004])
    assert parts.step == pytest.approx([0.018, 0.028])
    assert parts.num_steps == [3, 1] and parts.num_visits == [2, 1]
    assert parts.delivery == pytest.approx(0.004)
    assert parts.e2e == pytest.approx(0.070) and parts.parts_sum == pytest.approx(parts.e2e)
    assert parts.first_token_steps == pytest.approx(0.006) and parts.first_token_delivery == pytest.approx(0.001)
    assert parts.ttft == pytest.approx(parts.to_first_launch + parts.first_token_steps + parts.first_token_delivery)


def test_first_token_after_a_dropped_token_counts_its_steps():
    steps = (RouteEvent("b", 0, 1, False, 1.006, 1.0), RouteEvent("b", 1, -1, True, 1.040, 1.010))
    parts = breakdown(Timeline("b", 0.99, 1.041, 1.041, steps), 2)
    assert parts.first_token_steps == pytest.approx(0.040) and parts.first_token_delivery == pytest.approx(0.001)
    assert parts.handoff == pytest.approx([0.0, 0.004]) and parts.num_visits == [1, 1]


def test_timelines_come_from_events_in_any_order_and_only_for_timed_requests():
    shuffled = [*reversed(_r2r_timeline().steps), RouteEvent("other", 0, -1, True, 0.5, 0.49)]
    (timeline,) = timelines_from(shuffled, {"a": (0.0, 0.017, 0.070)})
    assert timeline.steps == _r2r_timeline().steps


def test_summary_means_counts_and_comparison():
    a = breakdown(_r2r_timeline(), 2)
    slow = Timeline("c", 0.0, 0.027, 0.090, tuple(e._replace(request_id="c") for e in _r2r_timeline().steps))
    b = breakdown(slow, 2)  # the same steps, delivered 10 and 20 ms later
    out = summarize([a, b], 2)
    assert out["num_requests"] == 2 and list(out["mean_ms"]) == part_names(2)
    assert out["mean_ms"]["delivery"] == pytest.approx(14.0) and out["mean_ms"]["e2e"] == pytest.approx(80.0)
    assert out["mean_ms"]["step[1]"] == pytest.approx(28.0) and out["mean_steps"] == [3.0, 1.0]
    assert out["p99_ms"]["e2e"] == pytest.approx(89.8)
    diff = compare(summarize([a], 2), out)
    assert diff["delivery"] == pytest.approx(10.0) and diff["step[0]"] == pytest.approx(0.0)
    assert compare({"num_requests": 0}, out) == {}


def test_steps_without_launch_times_or_no_steps_are_refused():
    old = Timeline("d", 0.0, 0.1, 0.1, (RouteEvent("d", 0, -1, True, 0.1),))
    with pytest.raises(ConfigError, match="launch time"):
        breakdown(old, 1)
    with pytest.raises(ConfigError, match="no steps"):
        breakdown(Timeline("e", 0.0, 0.1, 0.1, ()), 1)


def test_simulated_requests_break_down_into_their_constant_steps(r2r):
    sim = Simulation(r2r((1, 1), concurrency=4, workload="short-reasoning"), record_trace=True)
    sim.run(time_s=60.0)
    assert sim.request_times
    out = of_requests(sim.route_events(), sim.request_times, 2)
    assert out["num_requests"] == len(sim.request_times)
    mean = out["mean_ms"]
    assert mean["delivery"] == 0.0 and mean["first_token_delivery"] == 0.0  # the simulator delivers at the step's end
    assert mean["step[0]"] == pytest.approx(6.0 * out["mean_steps"][0])
    assert mean["step[1]"] == pytest.approx(27.9 * out["mean_steps"][1])
    parts = sum(v for k, v in mean.items() if k.split("[")[0] in ("to_first_launch", "queue", "handoff", "step"))
    assert parts == pytest.approx(mean["e2e"])
    assert mean["handoff[1]"] > 0  # a hand-off waits for the large model's running step
