"""The simulator against the analytic throughput model, on the model's own assumptions (constant latencies,
stationary Markov routing, endless closed-loop requests).

Runs here are short (25,000 tokens: relative standard deviation of the simulated throughput about 0.8%), so
the tolerance is 3%; benchmarks/model_check.py runs the full grid (N = 1..8, every feasible threshold, M = 2,
and an M = 3 case) long enough for the 1% bound and commits its JSON.
"""

from dataclasses import replace

import pytest

from trcore import policies_for
from trcore.throughput import ThroughputModel
from trsim import markov_config, simulate
from trsim.check import compare_point, model_optimum
from trsim.latency import TableModel
from trsim.sweep import best_thresholds, feasible_thresholds, grid, run_sweep

R2R = ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279])
THREE = (
    [[0.8, 0.15, 0.05], [0.6, 0.3, 0.1], [0.5, 0.2, 0.3]],
    [[1.0, 0.5, 0.0], [1.0, 1.0, 0.5], [1.0, 1.0, 1.0]],
    [0.005, 0.012, 0.03],
)
TOKENS = 25_000


@pytest.mark.parametrize(
    ("system", "concurrency", "thresholds"),
    [(R2R, 1, (1, 1)), (R2R, 3, (2, 2)), (R2R, 4, (1, 3)), (R2R, 8, (3, 2)), (THREE, 4, (1, 2, 1))],
)
def test_simulated_throughput_matches_the_model(system, concurrency, thresholds):
    P, C, latency = system
    row = compare_point(P, C, latency, concurrency, thresholds, TOKENS, seed=concurrency)
    assert abs(row["rel_diff"]) < 0.03, row


# Step latency by batch size (1, 2, 3 requests on model 0; 1, 2 on model 1), and batches capped at 3 and 2.
TABLES = ([0.006, 0.0075, 0.009], [0.0279, 0.031])
CAPS = [3, 2]


@pytest.mark.parametrize(("concurrency", "thresholds"), [(6, (2, 1)), (6, (1, 2)), (8, (3, 2))])
def test_simulated_throughput_matches_the_model_with_batch_caps_and_latency_tables(concurrency, thresholds):
    P, C, _ = R2R
    tables = [TableModel(range(1, len(t) + 1), t) for t in TABLES]
    config = markov_config(P, C, tables, thresholds, concurrency, "endless", seed=concurrency)
    config = replace(config, policies=policies_for(list(thresholds), max_batch=CAPS)).with_quantum(1e-4)
    # The first tokens come from the synchronized start (every request prefilled on model 0 at once): excluded.
    sim = simulate(config, tokens=TOKENS + 5_000, warmup_tokens=5_000)
    model = ThroughputModel(P, C, [list(t) for t in TABLES], quantum_s=1e-4, max_batch=CAPS)
    expect = model.solve(concurrency, list(thresholds)).throughput_tok_s
    assert sim.throughput_tok_s == pytest.approx(expect, rel=0.03)
    assert [max(m.batch_histogram) for m in sim.models] == CAPS  # the caps bind: N is above both


def test_a_simulated_sweep_picks_the_models_best_thresholds():
    P, C, latency = R2R
    config = markov_config(P, C, latency, concurrency=3).with_quantum(1e-4)
    rows = run_sweep({"r2r": config}, grid({"r2r": config}, [3], None), tokens=15_000)
    assert len(rows) == len(feasible_thresholds(2, 3)) == 6
    # the model's best (1, 2) leads the runner-up by 4%, several times the noise of these runs
    assert best_thresholds(rows)[("r2r", 3)] == model_optimum(P, C, latency, 3) == (1, 2)
