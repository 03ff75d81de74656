"""The bookkeeping of benchmarks/adaptive_bench.py on hand-worked inputs: phases cut into bins and summed back,
settling and flapping counted from a switch list, the threshold timeline, and the targets' verdicts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from trsim.phases import Phase

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("adaptive_bench", ROOT / "benchmarks" / "adaptive_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_split_phases_keeps_overrides_on_the_first_bin() -> None:
    phases = [Phase(12.0, concurrency=8, thresholds=(2, 1)), Phase(5.0, concurrency=64)]
    bins, owner = bench.split_phases(phases, 5.0)
    assert [b.duration_s for b in bins] == [5.0, 5.0, 2.0, 5.0]
    assert owner == [0, 0, 0, 1]
    assert (bins[0].concurrency, bins[0].thresholds) == (8, (2, 1))
    assert (bins[1].concurrency, bins[1].thresholds) == (None, None)
    assert bins[3].concurrency == 64


def test_phase_figures_sum_the_bins() -> None:
    records = [
        {"start_s": 0.0, "end_s": 5.0, "committed_tokens": 500, "thresholds": [1, 1]},
        {"start_s": 5.0, "end_s": 10.0, "committed_tokens": 1500, "thresholds": [2, 1]},
        {"start_s": 10.0, "end_s": 12.0, "committed_tokens": 100, "thresholds": [2, 1]},
    ]
    rows = bench.phase_figures(records, [0, 0, 1])
    assert [(r["start_s"], r["end_s"], r["committed_tokens"]) for r in rows] == [(0.0, 10.0, 2000), (10.0, 12.0, 100)]
    assert [r["throughput_tok_s"] for r in rows] == [200.0, 50.0]
    assert rows[0]["thresholds"] == [2, 1]


def _switch(t: float, new: list[int]) -> dict[str, object]:
    return {"time_s": t, "new": new}


def test_settling_first_arrival_at_the_final_vector_and_flaps_after_it() -> None:
    # Phase [30, 60): in force (8, 1); switches to (1, 1) at 36, (2, 1) at 41, back to (1, 1) at 50; a switch
    # at 61 belongs to the next phase. Final (1, 1), first in force at 36: 6 s, two switches after it.
    switches = [_switch(36, [1, 1]), _switch(41, [2, 1]), _switch(50, [1, 1]), _switch(61, [4, 1])]
    got = bench.settling(switches, 30.0, 60.0, [8, 1], [1, 1])
    assert got == {"final": [1, 1], "reached_bstar": True, "settle_s": 6.0, "switches": 3, "switches_after": 2}


def test_settling_without_a_switch_is_zero_and_says_whether_bstar_held() -> None:
    assert bench.settling([], 0.0, 30.0, [8, 1], [1, 1]) == {
        "final": [8, 1],
        "reached_bstar": False,
        "settle_s": 0.0,
        "switches": 0,
        "switches_after": 0,
    }


def test_thresholds_timeline_steps_to_the_end() -> None:
    got = bench.thresholds_timeline([8, 1], [_switch(36.0, [1, 1])], 60.0)
    assert got == [(0.0, [8, 1]), (36.0, [1, 1]), (60.0, [1, 1])]


def test_targets_verdicts_from_hand_figures() -> None:
    # Two phases then the overall figure. Adaptive: 97/100 and 90/100 of the oracle; B = 1 95 and 91 (so 90 is
    # 98.9% of it); the best static 95 and 91 overall 93 against the oracle's 100: loss 7%, adaptive (93.5)
    # recovers (93.5 - 93) / (100 - 93) = 1/14 of it.
    rows = {
        "adaptive": [97.0, 90.0, 93.5],
        "oracle": [100.0, 100.0, 100.0],
        "b1": [95.0, 91.0, 93.0],
        "best_static": [95.0, 91.0, 93.0],
    }
    got = bench.targets(rows, collapse_phase=1)
    assert got["oracle_every_phase"]["ratio"] == pytest.approx([0.97, 0.90])
    assert got["oracle_every_phase"]["met"] is False
    assert got["b1_every_phase"]["ratio"] == pytest.approx([97 / 95, 90 / 91])
    assert got["b1_every_phase"]["met"] is False  # 90 / 91 = 0.989 < 0.99
    assert got["best_static_overall"]["met"] is True
    assert got["static_loss_to_oracle"] == pytest.approx(0.07)
    assert got["adaptive_recovers"] == pytest.approx(0.5 / 7)
    assert got["collapse_recovery"] == {"phase": 1, "ratio": pytest.approx(0.9), "floor": 0.9, "met": True}


def test_after_settling_counts_whole_bins_from_the_settled_moment() -> None:
    # Settled at 36 s: the 35-40 bin starts before it, so only 40-45 and 45-50 (phase end 50) count:
    # (100 * 5 + 300 * 5) / (200 * 5 + 400 * 5) = 2000 / 3000.
    def bins(values: list[float]) -> list[dict[str, float]]:
        return [{"start_s": 35.0 + 5 * k, "end_s": 40.0 + 5 * k, "throughput_tok_s": v} for k, v in enumerate(values)]

    got = bench.after_settling(bins([50.0, 100.0, 300.0, 7.0]), bins([60.0, 200.0, 400.0, 9.0]), 36.0, 50.0)
    assert got == pytest.approx(2 / 3)
    assert bench.after_settling(bins([1.0]), bins([1.0]), 41.0, 50.0) is None


def test_phase_starts_are_the_first_bins_of_later_phases() -> None:
    records = [{"start_s": float(t)} for t in (0, 5, 10, 15, 20)]
    assert [r["start_s"] for r in bench.phase_starts(records, [0, 0, 1, 1, 2])] == [10.0, 20.0]
