"""Learning step times from nothing: the fitted line and the flat and steep lines its spread allows, worked by hand,
and the controller holding a switch toward more batching that the window's noise cannot tell from none."""

import math

import pytest

from trcore.adaptive import AdaptiveConfig, AdaptiveController
from trcore.adaptive_solve import worst_gain
from trcore.adaptive_tables import fit_table
from trcore.adaptive_window import ObservationBuilder, ObservationWindow
from trcore.errors import ConfigError


def tally_of(steps):
    """(batch size, seconds) pairs as a step tally."""
    out = {}
    for b, t in steps:
        n, s, ss = out.get(b, (0, 0.0, 0.0))
        out[b] = (n + 1, s + t, ss + t * t)
    return out


def test_an_exact_line_has_no_spread():
    fit = fit_table(tally_of([(1, 0.010), (1, 0.010), (3, 0.014), (3, 0.014)]), None, 4, sigma=2.0)
    assert fit.latency_s == pytest.approx((0.010, 0.012, 0.014, 0.016))
    assert fit.slope_error_s == pytest.approx(0.0, abs=1e-12)
    assert fit.flat_s == pytest.approx(fit.latency_s) and fit.steep_s == pytest.approx(fit.latency_s)


def test_a_noisy_line_by_hand():
    # Slope 2 ms per request through (2, 12 ms); every step 1 ms off the line: residual 4e-6 s^2 over 2 degrees
    # of freedom, sum of squares of the batch sizes about their mean 4, so the slope's error is sqrt(5e-7).
    fit = fit_table(tally_of([(1, 0.009), (1, 0.011), (3, 0.013), (3, 0.015)]), None, 4, sigma=2.0)
    error = math.sqrt(4e-6 / 2 / 4)
    assert fit.slope_error_s == pytest.approx(error)
    assert fit.latency_s == pytest.approx((0.010, 0.012, 0.014, 0.016))
    flat, steep = 0.002 - 2 * error, 0.002 + 2 * error
    assert fit.flat_s == pytest.approx(tuple(0.012 + flat * (b - 2) for b in range(1, 5)))
    # The steep line may fall below the quickest batch measured (10 ms) at batch 1: it has no floor.
    assert fit.steep_s == pytest.approx(tuple(0.012 + steep * (b - 2) for b in range(1, 5)))
    assert fit.steep_s[0] < 0.010


def test_one_batch_size_tells_nothing_about_the_slope():
    fit = fit_table(tally_of([(4, 0.020)] * 3), None, 5, sigma=2.0)
    assert fit.slope_error_s == math.inf
    assert fit.latency_s == pytest.approx((0.020,) * 5) and fit.flat_s == pytest.approx((0.020,) * 5)
    # At most the line through the origin: 5 ms per request, no saving from batching at all.
    assert fit.steep_s == pytest.approx((0.005, 0.010, 0.015, 0.020, 0.025))


def test_a_base_table_has_no_spread_lines():
    fit = fit_table(tally_of([(2, 0.030)]), [0.010, 0.015, 0.020], 3, sigma=2.0)
    assert fit.scale == pytest.approx(2.0) and fit.flat_s is None and fit.steep_s is None


def test_worst_gain_takes_every_combination_of_the_fitted_models_lines():
    w = ObservationWindow(2, window_s=10.0)
    b = ObservationBuilder(2, 0.0, 4)
    b.record_route(0, 1, True)
    b.record_route(1, 0, True)
    for t in (0.009, 0.011, 0.013, 0.015):  # model 0: noisy, model 1: exact
        b.record_step(0, 1 if t < 0.012 else 3, t)
    for bs in (1, 1, 3, 3):
        b.record_step(1, bs, 0.020 + 0.004 * bs)
    w.add(b.flush(1.0))
    est = w.estimate([4, 4], None, sigma=2.0)
    seen = []

    def gain(tables):
        seen.append(tuple(tuple(row) for row in tables))
        return 0.05 - tables[0][3]  # less gain the steeper model 0's line

    worst = worst_gain(est, gain)
    assert len(seen) == 2 and {s[0] for s in seen} == {est.flat_s[0], est.steep_s[0]}
    assert all(s[1] == est.latency_s[1] for s in seen)
    assert worst == pytest.approx(0.05 - est.steep_s[0][3])
    assert worst_gain(w.estimate([4, 4], None, sigma=0.0), gain) is None  # no spread asked: nothing to check


def span(start, end, noise, sizes=(2, 3, 4, 5), reps=20):
    """Learning from nothing: reasoning-like routing at N = 8; the steps on lines (28 ms + 1 ms and 60 ms +
    2 ms per request) at ``sizes``, alternately ``noise`` seconds above and below."""
    b = ObservationBuilder(2, start, 8)
    for i, row in enumerate([[0.5, 0.5], [1.0, 0.0]]):
        for j, p in enumerate(row):
            for _ in range(round(p * 2000)):
                b.record_route(i, j, True)
        for size in sizes:
            for k in range(reps):
                d = noise[i] if k % 2 else -noise[i]
                b.record_step(i, size, (0.028, 0.060)[i] + (0.001, 0.002)[i] * size + d)
    return b.flush(end)


@pytest.mark.parametrize(
    ("noise", "gain_sigma", "applied"),
    [((0.0, 0.0), 2.0, True), ((0.002, 0.004), 2.0, False), ((0.002, 0.004), 0.0, True)],
)
def test_a_switch_toward_batching_must_hold_within_the_tables_spread(noise, gain_sigma, applied):
    ctl = AdaptiveController(AdaptiveConfig(window_s=5.0, gain_sigma=gain_sigma), (1, 1))
    ctl.observe(span(0.0, 5.0, noise))
    retune = ctl.decide(5.0)
    # The fitted lines are the same in every case (the noise averages out): so is the best vector and its gain.
    assert retune.new == (2, 2) and retune.predicted_gain > 0.02
    assert retune.applied is applied and ctl.thresholds == ((2, 2) if applied else (1, 1))
    if applied:
        assert retune.worst_gain is None or retune.worst_gain > 0.02
    else:
        assert retune.reason == "below min_gain within the tables' spread" and retune.worst_gain < 0.02


def test_a_switch_short_of_min_gain_on_the_fitted_tables_is_not_solved_again_on_the_others():
    ctl = AdaptiveController(AdaptiveConfig(window_s=5.0), (2, 1))
    ctl.observe(span(0.0, 5.0, (0.002, 0.004)))
    retune = ctl.decide(5.0)
    assert retune.new == (2, 2) and 0 < retune.predicted_gain < 0.02  # batches more, but by too little
    assert retune.reason == "below min_gain" and retune.worst_gain is None


def test_gain_sigma_must_not_be_negative():
    with pytest.raises(ConfigError, match="gain_sigma"):
        AdaptiveConfig(gain_sigma=-1.0)
