"""The change test in the adaptive controller's window, on hand-built spans: a routing or concurrency change is
found where it starts, noise of a few steps is not, and the controller solves and switches on the newer part at
once (lifting ``min_interval_s``) where without the test it waits for the window to slide."""

import random

import pytest

from trcore.adaptive import AdaptiveConfig, AdaptiveController
from trcore.adaptive_change import change_point, routing_changed, tally
from trcore.adaptive_config import has_moved
from trcore.adaptive_window import ObservationBuilder, ObservationWindow

from .test_adaptive import BASE, MILD
from .test_adaptive import window as span

#: Half the small model's steps hand off: at N = 8 on the issue's tables the best vector delays the large model.
REASONING = [[0.5, 0.5], [1.0, 0.0]]


def seconds(P, start, end, **kw):
    return [span(P, t, t + 1.0, **kw) for t in range(start, end)]


KNOBS = {"tolerance": 0.02, "concurrency_tolerance": 0.1, "sigma": 4.0}


def test_a_routing_change_is_found_where_it_starts():
    obs = seconds(MILD, 0, 4) + seconds(REASONING, 4, 5)
    assert change_point(obs, 1.0, 2.0, **KNOBS) == 4.0
    assert change_point(seconds(MILD, 0, 5), 1.0, 2.0, **KNOBS) is None


def test_a_concurrency_change_is_found_and_a_small_one_is_not():
    assert change_point(seconds(MILD, 0, 4) + seconds(MILD, 4, 5, concurrency=64), 1.0, 2.0, **KNOBS) == 4.0
    # 8 -> 8.5: half a request is below the one-request floor
    assert change_point(seconds(MILD, 0, 4) + seconds(MILD, 4, 5, concurrency=8.5), 1.0, 2.0, **KNOBS) is None


def at(concurrencies):
    """1 s spans of MILD traffic at these mean active counts."""
    return [span(MILD, t, t + 1.0, concurrency=n) for t, n in enumerate(concurrencies)]


def test_a_closed_loop_swinging_by_a_square_root_is_not_a_change():
    # The stack at N = 64: 1 s means between 42 and 63. 63 after (43, 61, 48) is 12.3 above their mean, within
    # 4 x 9.3 (their deviation) x 1.15 = 42.9; 25 after four steady seconds near 64 is 38.8 below, beyond
    # 4 x 8 (the square-root floor) x 1.12 = 35.7.
    assert change_point(at([43, 61, 48, 63]), 1.0, 2.0, **KNOBS) is None
    assert change_point(at([43, 61, 48, 45]), 1.0, 2.0, **KNOBS) is None
    assert change_point(at([64, 64, 63, 64, 25]), 1.0, 2.0, **KNOBS) == 4.0
    assert change_point(at([8, 8, 8, 8, 24]), 1.0, 2.0, **KNOBS) == 4.0  # 16 > 4 x 2.8 x 1.12


def estimate(concurrencies):
    win = ObservationWindow(2, 100.0)
    for obs in at(concurrencies):
        win.add(obs)
    return win.estimate((64, 64), BASE)


def test_a_swing_within_the_spread_does_not_solve_again_a_real_move_does():
    config = AdaptiveConfig(concurrency_tolerance=0.1)
    steady = estimate([64] * 5)  # the square-root floor: 8 / sqrt(5) = 3.58 standard error
    assert steady.concurrency == 64 and steady.concurrency_error == pytest.approx(8 / 5**0.5)
    # 64 -> 57 is beyond the 10% tolerance but within 2 x hypot(3.58, 3.38) = 9.8: no new solve.
    assert not has_moved(steady, estimate([57] * 5), config)
    assert has_moved(steady, estimate([40] * 5), config)  # 24 > 2 x hypot(3.58, 2.83) = 9.1
    # A window whose spans swing (43-63) has a larger error than the floor: 50 after it is noise.
    swinging = estimate([43, 61, 48, 63, 55])
    assert swinging.concurrency_error > 8 / 5**0.5
    assert not has_moved(swinging, estimate([50] * 5), config)


def test_a_window_over_the_start_up_ramp_does_not_hide_the_move_from_it():
    config = AdaptiveConfig(concurrency_tolerance=0.1)
    ramp = estimate([0] * 4 + [8] * 6)  # mean 4.8: the solve saw N = 5, its spans 0 and 8 (error 1.31)
    steady = estimate([8] * 10)  # the square-root floor: 2.83 / sqrt(10) = 0.89
    assert ramp.concurrency == 5 and steady.concurrency == 8
    assert ramp.concurrency_error == pytest.approx(1.306, abs=1e-3)
    # 3 requests apart: within 2 x hypot(1.31, 0.89) = 3.2 of two noisy windows, but the ramp's spread is the ramp,
    # not noise: at most the steady window's error counts for it, 2 x hypot(0.89, 0.89) = 2.5.
    assert has_moved(ramp, steady, config)
    assert not has_moved(steady, estimate([8] * 9 + [7]), config)


def test_too_short_a_history_tells_nothing():
    obs = seconds(MILD, 0, 1) + seconds(REASONING, 1, 2)
    assert change_point(obs, 1.0, 2.0, **KNOBS) is None  # the older part spans 1 s of the 2 needed
    assert change_point(obs, 0.0, 0.0, **KNOBS) is None  # the test turned off


def test_a_few_steps_are_noise_many_are_a_change():
    # 10% hand-offs in 1,000 steps, then 20% in the next 30: 0.1 apart is 1.8 standard errors, no change;
    # the same 20% over 1,000 steps is 6 standard errors.
    before = tally([span([[0.9, 0.1], [1.0, 0.0]], 0, 4)])
    few = tally([span([[0.8, 0.2], [1.0, 0.0]], 4, 5, steps=30)])
    many = tally([span([[0.8, 0.2], [1.0, 0.0]], 4, 5)])
    assert not routing_changed(before, few, 0.02, 4.0)
    assert routing_changed(before, many, 0.02, 4.0)
    assert not routing_changed(before, many, 0.2, 4.0)  # within the tolerance


def controller(**knobs):
    knobs = {"window_s": 5.0, "min_gain": 0.02, "min_interval_s": 30.0, "solve_interval_s": 5.0, **knobs}
    config = AdaptiveConfig(**knobs)
    return AdaptiveController(config, (1, 1), base_latency_s=BASE, started_s=0.0)


def feed(ctl, P, start, end):
    decisions = []
    for obs in seconds(P, start, end):
        ctl.observe(obs)
        decisions.append(ctl.decide(obs.end_s))
    return decisions


def test_the_controller_switches_one_tick_after_the_change():
    ctl = controller()
    feed(ctl, MILD, 0, 5)  # (1, 2) is 1% better than B = 1: below min_gain, (1, 1) stays
    assert ctl.thresholds == (1, 1) and ctl.num_solves == 1
    (retune,) = feed(ctl, REASONING, 5, 6)
    assert ctl.changes == [6.0] and len(ctl.window.observations) == 1
    # Solved on the newer second alone: the reasoning traffic's vector, at once, though min_interval_s (30 s)
    # has not passed since the start.
    assert retune.applied and retune.time_s == 6.0 and tuple(map(tuple, REASONING)) == retune.inputs.P
    assert retune.new[0] == 1 and retune.new[1] > 1 and retune.predicted_gain > 0.02


def test_without_the_test_the_controller_waits_for_the_window():
    ctl = controller(change_window_s=0.0)
    feed(ctl, MILD, 0, 5)
    decisions = feed(ctl, REASONING, 5, 12)
    assert ctl.changes == [] and ctl.switches == []  # mixed windows, then min_interval_s holds it
    assert any(d is not None and d.reason == "min_interval_s" for d in decisions)


def noisy_run(**knobs):
    """120 s at 300 request-steps a second on the small model, 30% handing off, drawn: binomial noise only."""
    rng = random.Random(7)
    ctl = controller(min_interval_s=10.0, **knobs)
    for t in range(120):
        handoffs = sum(rng.random() < 0.3 for _ in range(300))
        b = ObservationBuilder(2, float(t), 8)
        for _ in range(handoffs):
            b.record_route(0, 1, True)
            b.record_route(1, 0, True)
        for _ in range(300 - handoffs):
            b.record_route(0, 0, True)
        for i in range(2):
            b.record_step(i, 4, BASE[i][3])
        ctl.observe(b.flush(t + 1.0))
        ctl.decide(t + 1.0)
    return ctl


def test_stationary_noise_is_not_a_change():
    tested, untested = noisy_run(), noisy_run(change_window_s=0.0)
    assert tested.changes == []
    assert [(s.time_s, s.new) for s in tested.switches] == [(s.time_s, s.new) for s in untested.switches]


def test_knobs_are_checked():
    with pytest.raises(Exception, match="change_window_s"):
        AdaptiveConfig(window_s=5.0, change_window_s=5.0)
    with pytest.raises(Exception, match="change_sigma"):
        AdaptiveConfig(change_sigma=0.0)
    assert AdaptiveConfig(window_s=8.0).change_s == 2.0 and AdaptiveConfig(change_window_s=0.0).change_s == 0.0
