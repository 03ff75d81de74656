"""The adaptive threshold controller on scripted windows: its estimates worked by hand, the switch the issue's
collapse case calls for, hysteresis in a stationary window, no switch below ``min_gain``, ``min_interval_s``."""

import pytest

from trcore.adaptive import AdaptiveConfig, AdaptiveController, in_force
from trcore.adaptive_window import ObservationBuilder, ObservationWindow
from trcore.errors import ConfigError


def table(first_ms: float, last_ms: float, n: int = 64) -> list[float]:
    """The issue's tables: linear from batch 1 to batch 64, in seconds."""
    return [(first_ms + (last_ms - first_ms) * k / 63) / 1000 for k in range(n)]


BASE = [table(6.0, 18.0), table(27.9, 62.0)]
#: The issue's collapse case: at N = 8, B = (8, 1) gives 181 tok/s and (1, 1) 573 in its simulation.
COLLAPSE = [[0.85, 0.15], [0.5, 0.5]]
#: Here (1, 2) beats (1, 1) by about 1% at N = 8 (779.7 vs 787.1 tok/s on the exact chain).
MILD = [[0.9, 0.1], [1.0, 0.0]]


def window(P, start, end, concurrency=8, scale=1.0, steps=1000):
    """One scripted span: ``steps`` request-steps per model split by P, all tokens kept, steps of batch 4
    taking ``scale`` times the base table."""
    b = ObservationBuilder(2, start, concurrency)
    for i, row in enumerate(P):
        for j, p in enumerate(row):
            for _ in range(round(p * steps)):
                b.record_route(i, j, True)
        for _ in range(steps // 4):
            b.record_step(i, 4, BASE[i][3] * scale)
    return b.flush(end)


def controller(thresholds, **knobs):
    knobs.setdefault("window_s", 5.0)  # the scripted spans fill the window
    return AdaptiveController(AdaptiveConfig(**knobs), thresholds, base_latency_s=BASE)


def test_builder_tallies_routes_steps_and_the_time_weighted_active_count():
    b = ObservationBuilder(2, 0.0, num_active=4)
    b.record_route(0, 1, True)
    b.record_route(0, 1, False)
    b.record_route(1, 0, True)
    b.record_step(0, 2, 0.01)
    b.record_step(0, 2, 0.03)
    b.set_active(8, 1.0)  # 4 active for 1 s, then 8 for 3 s: 28 request-seconds
    obs = b.flush(4.0)
    assert obs.transitions == ((0, 2), (1, 0)) and obs.kept == ((0, 1), (1, 0))
    assert obs.active_s == pytest.approx(28.0)
    assert obs.steps[0] == {2: (2, pytest.approx(0.04), pytest.approx(0.001))} and obs.steps[1] == {}
    assert b.flush(5.0).active_s == pytest.approx(8.0)  # the next span starts from the count in force


def test_window_estimates_by_hand():
    w = ObservationWindow(2, window_s=10.0)
    w.add(window(COLLAPSE, 0.0, 5.0, concurrency=8, scale=2.0))
    est = w.estimate([8, 8], BASE)
    assert est.P == ((0.85, 0.15), (0.5, 0.5)) and est.routing.C == ((1.0, 1.0), (1.0, 1.0))
    assert est.concurrency == 8 and est.scale == (pytest.approx(2.0), pytest.approx(2.0))
    assert est.latency_s[1][0] == pytest.approx(2 * 0.0279)
    assert est.num_steps == (250, 250) and est.span_s == 5.0


def test_window_forgets_old_spans_and_fits_a_line_without_a_base():
    w = ObservationWindow(1, window_s=10.0)
    for k in range(4):  # spans of 5 s: the window keeps the last two
        b = ObservationBuilder(1, 5.0 * k, 2)
        b.record_route(0, 0, True)
        b.record_step(0, 1, 0.010)
        b.record_step(0, 3, 0.014)
        w.add(b.flush(5.0 * (k + 1)))
    assert len(w.observations) == 2 and w.span_s == 10.0
    est = w.estimate([4], None)
    assert est.latency_s[0] == pytest.approx((0.010, 0.012, 0.014, 0.016))  # 10 ms + 2 ms per request
    assert est.scale == (None,)


def test_a_model_without_steps_and_without_a_base_waits():
    w = ObservationWindow(2, window_s=10.0)
    b = ObservationBuilder(2, 0.0, 2)
    b.record_route(0, 0, True)
    b.record_step(0, 1, 0.01)
    w.add(b.flush(1.0))
    assert w.estimate([2, 2], None) is None


def test_collapsed_vector_switches_to_the_optimum():
    ctl = controller((8, 1))
    ctl.observe(window(COLLAPSE, 0.0, 5.0))
    retune = ctl.decide(5.0)
    assert retune is not None and retune.applied and retune.reason == "gain"
    assert (retune.old, retune.new) == ((8, 1), (1, 1)) and ctl.thresholds == (1, 1)
    # The exact chain agrees with the simulated figures (573 and 181 tok/s) within 2%.
    assert retune.predicted_tok_s == pytest.approx(573, rel=0.02)
    assert retune.current_tok_s == pytest.approx(181, rel=0.02)
    assert retune.predicted_gain > 2.0 and ctl.switches == [retune]


def test_stationary_window_does_not_flap_nor_solve_again():
    ctl = controller((8, 1), min_interval_s=0.0)
    for k in range(12):
        jitter = 0.005 if k % 2 else -0.005  # P wobbles by less than the tolerance
        P = [[0.85 + jitter, 0.15 - jitter], [0.5, 0.5]]
        ctl.observe(window(P, 5.0 * k, 5.0 * (k + 1)))
        ctl.decide(5.0 * (k + 1))
    assert len(ctl.switches) == 1 and ctl.num_solves == 1


def test_no_switch_below_min_gain():
    strict = controller((1, 1), min_gain=0.02)
    strict.observe(window(MILD, 0.0, 5.0))
    retune = strict.decide(5.0)
    assert retune is not None and not retune.applied and strict.thresholds == (1, 1)
    eager = controller((1, 1), min_gain=0.005)
    eager.observe(window(MILD, 0.0, 5.0))
    switched = eager.decide(5.0)
    assert switched.applied and switched.new == (1, 2)
    assert 0.005 < switched.predicted_gain < 0.02


def test_min_interval_holds_a_switch_until_it_passed_without_solving_again():
    ctl = AdaptiveController(
        AdaptiveConfig(min_interval_s=30.0, window_s=5.0), (8, 1), base_latency_s=BASE, started_s=0.0
    )
    ctl.observe(window(COLLAPSE, 0.0, 5.0))
    held = ctl.decide(10.0)
    assert not held.applied and held.reason == "min_interval_s" and ctl.thresholds == (8, 1)
    assert ctl.decide(20.0) is None  # same inputs, still too soon: nothing new
    ctl.observe(window(COLLAPSE, 5.0, 31.0))
    applied = ctl.decide(31.0)
    assert applied.applied and applied.time_s == 31.0 and ctl.thresholds == (1, 1)
    assert ctl.num_solves == 1


def test_no_decision_before_min_steps():
    ctl = controller((1, 1), min_steps=5000)
    ctl.observe(window(COLLAPSE, 0.0, 5.0))
    assert ctl.decide(5.0) is None and ctl.num_solves == 0


def test_a_vector_is_solved_as_the_policies_clamp_it():
    assert in_force((8, 1), 8) == (8, 1)
    assert in_force((8, 4), 6) == (3, 1)  # peer slack 3 and 7: min(B, max(1, n - slack))


def test_bad_knobs_name_the_field():
    with pytest.raises(ConfigError, match=r"adaptive\.min_gain"):
        AdaptiveConfig(min_gain=1.5)
    with pytest.raises(ConfigError, match="window_s"):
        ObservationWindow(2, 0.0)


def test_state_is_json_ready():
    import json

    ctl = controller((8, 1))
    ctl.observe(window(COLLAPSE, 0.0, 5.0))
    ctl.decide(5.0)
    state = json.loads(json.dumps(ctl.state()))
    assert state["thresholds"] == [1, 1] and state["estimate"]["concurrency"] == 8
    assert state["last_retune"]["old"] == [8, 1]


def test_a_delaying_vector_that_no_longer_earns_its_waits_goes_back_to_no_delay():
    # Under MILD at N = 8, (1, 2) beats (1, 1) by about 0.95%.
    lax = controller((1, 2), min_gain=0.01)  # 0.95% is above half of 1%: (1, 2) stays
    lax.observe(window(MILD, 0.0, 5.0))
    kept = lax.decide(5.0)
    assert kept.new == (1, 1) and not kept.applied and lax.thresholds == (1, 2)
    strict = controller((1, 2), min_gain=0.04)  # below half of 4%: back to B = 1, at a predicted loss
    strict.observe(window(MILD, 0.0, 5.0))
    back = strict.decide(5.0)
    assert back.applied and strict.thresholds == (1, 1) and -0.02 < back.predicted_gain < 0
