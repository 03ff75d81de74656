"""Sweep grids: feasible threshold sets, skipping infeasible points, parallel runs equal serial runs."""

import pytest

from trcore import ConfigError, is_feasible
from trsim.plot import plot_sweep
from trsim.sweep import best_thresholds, feasible_thresholds, grid, run_sweep


@pytest.mark.parametrize(("models", "n"), [(2, 1), (2, 5), (3, 4)])
def test_feasible_thresholds_are_exactly_the_feasible_vectors(models, n):
    vectors = feasible_thresholds(models, n)
    assert all(is_feasible(b, n) for b in vectors)
    if models == 2:
        assert len(vectors) == n * (n + 1) // 2
    assert vectors == sorted(vectors) and len(set(vectors)) == len(vectors)


def test_grid_skips_vectors_infeasible_at_a_concurrency(r2r):
    points = grid({"a": r2r()}, [2, 4], [(1, 1), (3, 1)])
    assert [(p.concurrency, p.thresholds) for p in points] == [(2, (1, 1)), (4, (1, 1)), (4, (3, 1))]
    with pytest.raises(ConfigError, match="has 3 values"):
        grid({"a": r2r()}, [4], [(1, 1, 1)])


def test_parallel_sweep_equals_serial_sweep(r2r, tmp_path):
    configs = {"a": r2r(workload="short-reasoning")}
    points = grid(configs, [3], None)
    serial = run_sweep(configs, points, tokens=1500)
    parallel = run_sweep(configs, points, tokens=1500, jobs=2)
    strip = [{k: v for k, v in row.items() if k != "wall_s" and "per_wall" not in k} for row in serial]
    assert strip == [{k: v for k, v in row.items() if k != "wall_s" and "per_wall" not in k} for row in parallel]
    best = best_thresholds(serial)[("a", 3)]
    assert best == tuple(max(serial, key=lambda r: r["throughput_tok_s"])["thresholds"])
    plot_sweep(serial, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_a_scenario_that_sets_its_concurrency_runs_once_per_vector_at_its_own(r2r):
    from dataclasses import replace

    from trsim.phases import Phase

    phased = replace(r2r(), phases=(Phase(1.0, concurrency=6), Phase(1.0), Phase(1.0, concurrency=3)))
    points = grid({"phased": phased, "flags": r2r()}, [4], None)
    own = [p for p in points if p.scenario == "phased"]
    assert {p.concurrency for p in own} == {None}
    assert [p.thresholds for p in own] == feasible_thresholds(2, 3)  # bound by the smallest phase's N = 3
    assert {p.concurrency for p in points if p.scenario == "flags"} == {4}
    row = run_sweep({"phased": phased}, own[:1], tokens=600)[0]
    assert row["concurrency"] is None and row["throughput_tok_s"] > 0
    assert best_thresholds([row]) == {("phased", None): own[0].thresholds}
