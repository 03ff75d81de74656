"""What keeps the controller cheap and calm: the threshold grid it searches past ``max_candidates`` vectors, the
window it must fill before deciding, and step-time changes common to every model that need no new solve."""

import pytest

from tests.core.test_adaptive import BASE, window
from trcore.adaptive import AdaptiveConfig, AdaptiveController
from trcore.adaptive_window import ObservationBuilder
from trcore.errors import ConfigError
from trcore.throughput import ThroughputModel, feasible_thresholds, optimize_on_grid, threshold_grid

#: 40% of the small model's steps hand off: the best vector at N = 8 is (1, 5), off the grid.
REASONING = [[0.6, 0.4], [1.0, 0.0]]


def test_grid_holds_the_geometric_values_and_the_kept_vectors():
    grid = threshold_grid((64, 64), 64, keep=[(5, 7), (70, 1), (40, 40)])
    on_grid = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}
    assert grid[0] == (1, 1) and len(grid) == 119
    assert all(b in on_grid for v in grid[:118] for b in v)
    assert grid[118:] == [(5, 7)]  # (70, 1) clamps to (64, 1), already on the grid
    assert (40, 40) not in grid  # infeasible at N = 64: 78 requests could wait
    assert len(list(feasible_thresholds((64, 64), 64))) == 2080
    assert threshold_grid((3, 5), 4) == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2)]


def test_optimize_over_candidates_returns_the_best_of_them_and_always_no_delay():
    model = ThroughputModel(REASONING, [[1.0, 0.0], [1.0, 0.0]], BASE, quantum_s=6e-4)
    picked = model.optimize(8, candidates=[(1, 4), (1, 6), (2, 2)])
    assert [c.thresholds for c in picked.candidates] == [(1, 1), (1, 4), (1, 6), (2, 2)]
    singles = {v: model.solve(8, v).throughput_tok_s for v in [(1, 1), (1, 4), (1, 6), (2, 2)]}
    assert picked.thresholds == max(singles, key=singles.__getitem__)
    assert picked.throughput_tok_s == pytest.approx(max(singles.values()))
    with pytest.raises(ConfigError, match="threshold"):
        model.optimize(8, candidates=[(8, 8)])


@pytest.mark.parametrize("share", [0.1, 0.4, 0.7])
@pytest.mark.parametrize("n", [8, 16])
def test_grid_then_box_finds_the_full_searchs_optimum(share, n):
    model = ThroughputModel([[1 - share, share], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], BASE, quantum_s=6e-4)
    full = model.optimize(n)
    found = optimize_on_grid(model, n)
    assert found.throughput_tok_s == pytest.approx(full.throughput_tok_s, rel=1e-9)


def test_controller_searches_the_grid_past_max_candidates_keeping_the_vector_in_force():
    def best(thresholds):
        ctl = AdaptiveController(
            AdaptiveConfig(window_s=5.0, max_candidates=10, method="exact", min_gain=0.0), thresholds,
            base_latency_s=BASE,
        )  # fmt: skip
        ctl.observe(window(REASONING, 0.0, 5.0))
        retune = ctl.decide(5.0)
        return retune.new, retune.num_candidates

    full = AdaptiveController(AdaptiveConfig(window_s=5.0, method="exact", min_gain=0.0), (1, 1), base_latency_s=BASE)
    full.observe(window(REASONING, 0.0, 5.0))
    assert full.decide(5.0).new == (1, 5)  # 36 feasible vectors at N = 8: all searched
    assert full.retunes[-1].num_candidates == 36
    found, solved = best((1, 1))
    assert found == (1, 5) and solved < 36  # off the grid: found in the box around the grid's (1, 4) or (1, 6)


def test_no_decision_until_the_window_is_filled():
    ctl = AdaptiveController(AdaptiveConfig(window_s=10.0), (8, 1), base_latency_s=BASE)
    ctl.observe(window(REASONING, 0.0, 5.0))
    assert ctl.decide(5.0) is None and ctl.num_solves == 0
    ctl.observe(window(REASONING, 5.0, 10.0))
    assert ctl.decide(10.0) is not None and ctl.num_solves == 1
    half = AdaptiveController(AdaptiveConfig(window_s=10.0, min_fill=0.5), (8, 1), base_latency_s=BASE)
    half.observe(window(REASONING, 0.0, 5.0))
    assert half.decide(5.0) is not None


def scaled_span(start, end, scales):
    """A span like ``window``'s, each model's steps taking ``scales[i]`` times the base table."""
    b = ObservationBuilder(2, start, 8)
    for i, row in enumerate(REASONING):
        for j, p in enumerate(row):
            for _ in range(round(p * 1000)):
                b.record_route(i, j, True)
        for _ in range(250):
            b.record_step(i, 4, BASE[i][3] * scales[i])
    return b.flush(end)


@pytest.mark.parametrize(
    ("scales", "solves"),
    [((1.3, 1.3), 1), ((1.03, 1.0), 1), ((1.0, 1.2), 2), ((1.1, 1.0), 2)],
)
def test_step_times_resolve_only_when_they_move_apart(scales, solves):
    ctl = AdaptiveController(AdaptiveConfig(window_s=5.0, solve_interval_s=0.0), (1, 1), base_latency_s=BASE)
    ctl.observe(scaled_span(0.0, 5.0, (1.0, 1.0)))
    ctl.decide(5.0)
    ctl.observe(scaled_span(5.0, 10.0, scales))
    ctl.decide(10.0)
    assert ctl.num_solves == solves
