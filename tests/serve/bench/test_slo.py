"""SLO verdicts and the rate bisection (trserve/bench/slo.py) on hand-made windows and a scripted measure: the
p99s and the backlog bound worked by hand, each way a window fails, and a search whose verdict flips at a known
rate (no timing)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trserve.bench.slo import Targets, Verdict, bisect_rate, judge, percentile

TARGETS = Targets(tpot_p99_ms=30.0, ttft_p99_ms=1000.0)


def window(tpot_ms: list[float], ttft_ms: list[float], e2e_s: list[float], backlog: int = 0, errors: int = 0,
           rate: float = 2.0, targets: Targets = TARGETS) -> Verdict:  # fmt: skip
    return judge(rate, [t / 1e3 for t in tpot_ms], [t / 1e3 for t in ttft_ms], e2e_s, backlog, errors, targets)


def test_a_window_that_finishes_far_fewer_requests_than_arrive_fails_without_a_ttft_target():
    """The admitted requests decode fast and Little's law holds on their latencies; only the count shows the
    overload (60 s at 2 req/s: about 120 arrive, 40 finished)."""
    tpot_only = Targets(tpot_p99_ms=30.0, ttft_p99_ms=None)
    args = ([0.02] * 40, [0.1] * 40, [5.0] * 40, 10, 0, tpot_only)
    assert judge(2.0, *args).meets  # without the window's length: passed
    late = judge(2.0, *args, window_s=60.0)
    assert not late.meets and late.reasons == ("finished 40 of about 120.0 arrivals",)
    assert judge(2.0, [0.02] * 110, [0.1] * 110, [5.0] * 110, 10, 0, tpot_only, window_s=60.0).meets


def test_percentiles_interpolate_linearly_between_ranks():
    # 11 values 0..10: p99 sits at rank 9.9, p90 at rank 9
    values = [float(x) for x in range(11)]
    assert percentile(values, 99) == pytest.approx(9.9) and percentile(values, 90) == pytest.approx(9.0)
    assert percentile([4.0, 1.0], 50) == pytest.approx(2.5) and percentile([], 99) is None


def test_a_window_within_the_targets_meets_them_with_its_figures():
    tpot = [20.0] * 9 + [25.0]  # p99 at rank 8.91: 20 + 0.91 x 5
    e2e = [1.0] * 9 + [3.0]  # p90 at rank 8.1: 1 + 0.1 x 2 = 1.2 s
    v = window(tpot, [100.0] * 9 + [900.0], e2e, backlog=11, rate=2.0)
    assert v.meets and v.reasons == ()
    assert v.tpot_p99_ms == pytest.approx(24.55) and v.ttft_p99_ms == pytest.approx(100 + 0.91 * 800)
    assert v.latency_p90_s == pytest.approx(1.2) and v.backlog_limit == pytest.approx(1.5 * 2.0 * 1.2 + 8)
    assert (v.num_finished, v.num_errors, v.backlog) == (10, 0, 11)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [({"tpot_ms": [20.0, 40.0]}, "TPOT p99 39.8 > 30 ms"), ({"ttft_ms": [100.0, 1300.0]}, "TTFT p99 1288.0 > 1000 ms"),
     ({"backlog": 12}, "backlog 12 > 11.0"), ({"errors": 1}, "1 errors"),
     ({"tpot_ms": [], "ttft_ms": [], "e2e_s": []}, "no request finished")],
)  # fmt: skip
def test_each_way_a_window_fails(kwargs, reason):
    base = {"tpot_ms": [20.0, 21.0], "ttft_ms": [100.0, 110.0], "e2e_s": [1.0, 1.0], "backlog": 0, "rate": 2.0}
    v = window(**{**base, **kwargs})  # backlog bound: 1.5 x 2 x 1.0 + 8 = 11
    assert not v.meets and reason in v.reasons


def test_a_target_left_unset_is_not_checked_and_both_unset_is_refused():
    v = window([90.0, 95.0], [100.0, 110.0], [1.0, 1.0], targets=Targets(tpot_p99_ms=None, ttft_p99_ms=1000.0))
    assert v.meets and v.tpot_p99_ms == pytest.approx(94.95)
    with pytest.raises(ValueError, match="needs a TPOT or a TTFT target"):
        Targets(None, None)
    with pytest.raises(ValueError, match="must be > 0"):
        Targets(0.0, 10.0)


def scripted(flip_rps: float) -> tuple[list[float], Callable[[float], Verdict]]:
    """A measure that meets the targets at rates up to ``flip_rps`` and records what it was asked."""
    asked: list[float] = []

    def measure(rate: float) -> Verdict:
        asked.append(rate)
        ok = rate <= flip_rps
        return window([20.0 if ok else 40.0] * 3, [100.0] * 3, [1.0] * 3, rate=rate)

    return asked, measure


def test_a_failing_guess_is_halved_towards_the_flip():
    asked, measure = scripted(3.0)
    found = bisect_rate(measure, 8.0, steps=4)
    assert asked == [8.0, 4.0, 2.0, 3.0, 3.5]
    assert found.max_rate_rps == 3.0 and found.bracket_rps == (3.0, 3.5) and found.upper_failed
    assert [p.meets for p in found.probes] == [False, False, True, True, False]
    assert [p.rate_rps for p in found.probes] == asked


def test_a_meeting_guess_is_raised_by_half_until_it_fails():
    asked, measure = scripted(4.0)
    found = bisect_rate(measure, 2.0, steps=3)
    assert asked == [2.0, 3.0, 4.5, 3.75, 4.125, 3.9375]
    assert found.max_rate_rps == 3.9375 and found.bracket_rps == (3.9375, 4.125) and found.upper_failed


def test_raises_that_never_fail_leave_the_top_unprobed():
    asked, measure = scripted(100.0)
    found = bisect_rate(measure, 1.0, steps=1, max_raises=2)
    assert asked == [1.0, 1.5, 2.25, (2.25 + 3.375) / 2]
    assert found.bracket_rps == (2.8125, 3.375) and not found.upper_failed
    with pytest.raises(ValueError, match="guess > 0"):
        bisect_rate(measure, 0.0, steps=1)
    asked, measure = scripted(100.0)  # the planner's raises by default: on to 1.5**12 = 130x the guess
    found = bisect_rate(measure, 1.0, steps=0)
    assert found.upper_failed and found.bracket_rps == (1.5**11, 1.5**12) and len(asked) == 13
