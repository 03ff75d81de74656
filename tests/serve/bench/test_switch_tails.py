"""TPOT tails around switches (trserve/bench/switch_tails.py) and switch times mapped onto the bench's clock
(``PhasedRun.switch_times``), on hand-made records: which request counts where, and the quantiles by hand."""

from __future__ import annotations

import pytest

from trserve.bench.client import RequestRecord
from trserve.bench.phased import LoadPhase, PhasedRun
from trserve.bench.switch_tails import finished_tpots, tails_after_switches, tpot_s

START = 100.0  # the run's start on the bench's clock


def rec(done_s: float, tpot: float, tokens: int = 11, error: str | None = None) -> RequestRecord:
    """A request that finished ``done_s`` after the start with ``tokens`` tokens, ``tpot`` apart after the first."""
    done = START + done_s
    return RequestRecord(sent=done - 5.0, first=done - tpot * (tokens - 1), done=done, num_tokens=tokens, error=error)


def test_tpot_needs_two_tokens_and_no_error():
    assert tpot_s(rec(1.0, 0.02)) == pytest.approx(0.02)
    assert tpot_s(rec(1.0, 0.02, tokens=1)) is None
    assert tpot_s(rec(1.0, 0.02, error="HTTP 503")) is None
    assert tpot_s(RequestRecord(sent=0.0)) is None
    [(done, tpot)] = finished_tpots([rec(3.0, 0.01), rec(4.0, 0.01, tokens=1)], START)
    assert done == pytest.approx(3.0) and tpot == pytest.approx(0.01)


def test_the_window_after_a_switch_is_compared_with_the_rest_of_its_phase():
    phases = [LoadPhase(30.0, 4), LoadPhase(30.0, 4)]
    # Phase 0: TPOT 10 ms; the switch at 40 s (phase 1): 20 ms for 10 s, then 10 ms again; phase 1 steady at 10 ms.
    records = [rec(t, 0.010) for t in range(0, 30)] + [rec(30 + t * 0.5, 0.010) for t in range(20)]
    records += [rec(40 + t * 0.25, 0.020) for t in range(40)] + [rec(50 + t * 0.5, 0.010) for t in range(20)]
    [tail] = tails_after_switches(phases, records, START, [40.0], window_s=10.0, q=0.5, min_requests=10)
    assert tail["phase"] == 1 and tail["num_after"] == 40 and tail["num_steady"] == 40
    assert tail["tpot_after_s"] == pytest.approx(0.020) and tail["tpot_steady_s"] == pytest.approx(0.010)
    assert tail["ratio"] == pytest.approx(2.0)


def test_too_few_requests_give_no_ratio():
    phases = [LoadPhase(10.0, 1)]
    records = [rec(1.0, 0.01), rec(6.0, 0.01), rec(7.0, 0.01)]
    [tail] = tails_after_switches(phases, records, START, [5.0], window_s=3.0, min_requests=3)
    assert tail["num_after"] == 2 and tail["num_steady"] == 1 and tail["ratio"] is None


def test_switch_times_move_onto_the_runs_clock():
    before = {"now_s": 12.0, "cpu_s": 1.0, "switches": []}
    middle = {"now_s": 52.0, "cpu_s": 1.4, "switches": [{"time_s": 20.0}]}
    after = {"now_s": 82.0, "cpu_s": 1.7, "switches": [{"time_s": 20.0}, {"time_s": 47.5}]}
    # The controller's clock read 12 s when the bench's read 99.5; the run started at 100: offset -12.5 s.
    run = PhasedRun([], [], START, [before, middle, after], [99.5, 139.5, 169.5])
    assert run.switch_times() == pytest.approx([7.5, 35.0])
    assert run.controller_core_fraction() == pytest.approx([0.01, 0.01])  # 0.4 s over 40 s, 0.3 s over 30 s
    assert PhasedRun([], [], START).switch_times() == [] and PhasedRun([], [], START).controller_core_fraction() == []
