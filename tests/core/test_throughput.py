"""Throughput model: closed forms, input validation, chain structure, and properties checked by hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.core.test_throughput_reference import reference_throughput
from trcore.errors import ConfigError, InfeasibleError, NotIrreducibleError
from trcore.throughput import ThroughputModel, feasible_thresholds
from trcore.throughput.chain import chain_for
from trcore.throughput.rules import AnyFeasible, FixedThresholds
from trcore.throughput.universe import explore

R2R_P, R2R_C = [[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]


@pytest.mark.parametrize(("n", "latency", "threshold"), [(1, 0.006, 1), (5, 0.006, 3), (16, 0.0279, 16)])
def test_one_model_alone_makes_n_tokens_per_step(n, latency, threshold):
    res = ThroughputModel([[1.0]], [[1.0]], [latency]).solve(n, [threshold])
    assert res.throughput_tok_s == pytest.approx(n / latency, rel=1e-12)
    assert res.num_states == 1


def test_one_model_with_max_batch_makes_max_batch_tokens_per_step():
    res = ThroughputModel([[1.0]], [[2.0]], [[0.01, 0.02, 0.03]], quantum_s=1e-3, max_batch=[3]).solve(7, [1])
    # The queue never drops below the cap, so every step runs 3 requests x 2 tokens in 0.03 s.
    assert res.throughput_tok_s == pytest.approx(3 * 2 / 0.03, rel=1e-12)


@pytest.mark.parametrize(("l0", "l1"), [(0.006, 0.0279), (0.01, 0.01), (0.0003, 0.0101)])
def test_two_alternating_models_with_one_request(l0, l1):
    model = ThroughputModel([[0, 1], [1, 0]], [[1, 1], [1, 1]], [l0, l1], quantum_s=1e-4)
    res = model.solve(1, [1, 1])
    assert res.throughput_tok_s == pytest.approx(2 / (l0 + l1), rel=1e-9)
    assert res.num_states == 2


def test_transient_start_is_left_out_of_the_long_run():
    # Everything moves to model 1 and stays: the initial state (all on model 0) is transient.
    model = ThroughputModel([[0, 1], [0, 1]], [[5, 5], [0, 1]], [0.001, 0.004], quantum_s=1e-3)
    res = model.solve(3, [1, 3])
    assert res.throughput_tok_s == pytest.approx(3 / 0.004, rel=1e-12)
    assert res.num_states == 2


def test_several_closed_classes_are_reported():
    P = [[0, 0.5, 0.5], [0, 1, 0], [0, 0, 1]]  # the first batch's split decides where everyone stays
    model = ThroughputModel(P, np.ones((3, 3)).tolist(), [0.001, 0.002, 0.003], quantum_s=1e-3)
    with pytest.raises(NotIrreducibleError, match="3 closed classes"):
        model.solve(2, [1, 1, 1])


def test_infeasible_and_out_of_range_thresholds():
    model = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279])
    with pytest.raises(InfeasibleError, match="sum of"):
        model.solve(4, [3, 3])
    with pytest.raises(ConfigError, match=r"within 1\.\.4"):
        model.solve(4, [0, 1])
    with pytest.raises(ConfigError, match="one per model"):
        model.solve(4, [1])
    with pytest.raises(ConfigError, match="concurrency"):
        model.optimize(0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"P": [[0.6, 0.3], [1, 0]]}, "P"),
        ({"P": [[1.2, -0.2], [1, 0]]}, "P"),
        ({"P": [[1, 0, 0], [1, 0, 0]]}, "P"),
        ({"P": [["a", 1], [1, 0]]}, "P"),
        ({"P": []}, "P"),
        ({"C": [[1, 0]]}, "C"),
        ({"C": [[1, -1], [1, 0]]}, "C"),
        ({"C": [[1, float("inf")], [1, 0]]}, "C"),
        ({"latency_s": [0.006]}, "latency_s"),
        ({"latency_s": [0.006, -1.0]}, "latency_s"),
        ({"latency_s": [0.006, []]}, "latency_s"),
        ({"latency_s": [0.006, [0.01, 0.0]]}, "latency_s"),
        ({"latency_s": [0.006, "fast"]}, "latency_s"),
        ({"quantum_s": 0.0}, "quantum_s"),
        ({"quantum_s": 0.1}, "quantum_s"),  # coarser than twice the 6 ms latency
        ({"max_batch": [4]}, "max_batch"),
        ({"max_batch": [4, 0]}, "max_batch"),
    ],
)
def test_bad_model_input_names_the_field(kwargs, field):
    args = {"P": R2R_P, "C": R2R_C, "latency_s": [0.006, 0.0279], "quantum_s": 1e-4, "max_batch": None} | kwargs
    with pytest.raises(ConfigError) as info:
        ThroughputModel(**args)
    assert info.value.field == field


def test_too_many_states_is_an_error_not_a_runaway():
    model = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279], max_states=1000)
    with pytest.raises(ConfigError, match="more than 1000 states: use method 'sampled'") as info:
        model.optimize(16)
    assert info.value.field == "concurrency"


def test_latencies_are_rounded_to_the_quantum_and_reduced_by_their_gcd():
    model = ThroughputModel(R2R_P, R2R_C, [0.006, [0.0279, 0.03]], quantum_s=1e-4)
    assert model.spec.latency_units == ((20,), (93, 100))
    assert model.spec.unit_s == pytest.approx(3e-4)


def test_feasible_thresholds_enumerates_exactly_the_feasible_set():
    got = list(feasible_thresholds((4, 4, 2), 4))
    assert got == sorted(got)
    expect = [(a, b, c) for a in range(1, 5) for b in range(1, 5) for c in range(1, 3) if a + b + c - 3 < 4]
    assert got == expect


def test_optimize_in_two_processes_gives_the_same_candidates():
    model = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279])
    one, two = model.optimize(5), model.optimize(5, workers=2)
    assert one.candidates == two.candidates
    assert one.thresholds == two.thresholds


def test_optimize_keeps_no_delay_unless_the_best_beats_it_by_min_gain():
    model = ThroughputModel(R2R_P, R2R_C, [0.006, 0.0279])
    free = model.optimize(5)
    ones = next(c for c in free.candidates if c.thresholds == (1, 1))
    gain = free.throughput_tok_s / ones.throughput_tok_s - 1.0
    assert free.thresholds != (1, 1) and gain > 0  # delayed batching pays on this (GPU-like) latency
    assert model.optimize(5, min_gain=gain * 0.9).thresholds == free.thresholds
    kept = model.optimize(5, min_gain=gain * 1.1)
    assert kept.thresholds == (1, 1) and kept.throughput_tok_s == ones.throughput_tok_s
    with pytest.raises(ConfigError):
        model.optimize(5, min_gain=-0.1)


def test_optimize_reports_elapsed_time_by_the_clock_given():
    ticks = iter([10.0, 12.5])
    res = ThroughputModel([[1.0]], [[1.0]], [0.01]).optimize(3, clock=lambda: next(ticks))
    assert res.elapsed_s == 2.5
    assert [c.thresholds for c in res.candidates] == [(1,), (2,), (3,)]


# --- properties -------------------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    m = draw(st.integers(1, 3))
    P = []
    for _ in range(m):
        weights = draw(st.lists(st.integers(0, 4), min_size=m, max_size=m).filter(any))
        P.append([w / sum(weights) for w in weights])
    C = [draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=m, max_size=m)) for _ in range(m)]
    latency = [draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)) for _ in range(m)]
    max_batch = draw(st.none() | st.lists(st.integers(1, 4), min_size=m, max_size=m))
    n = draw(st.integers(1, 5 if m < 3 else 3))
    return P, C, [[q * 1e-3 for q in table] for table in latency], max_batch, n


def _max_rate(model, n):
    """Sum over models of the best tokens per second one model can reach with any batch up to its cap."""
    spec = model.spec
    caps = spec.batch_caps(n)
    return sum(
        max(b * c / (spec.latency(i, b) * spec.unit_s) for b in range(1, caps[i] + 1))
        for i, c in enumerate(spec.tokens_per_request_step)
    )


def _has_several_closed_classes(P, C, latency, max_batch, n, thresholds):
    quanta = [[round(x / 1e-3) for x in table] for table in latency]
    try:
        reference_throughput(P, C, quanta, 1e-3, n, thresholds, max_batch)
    except AssertionError as err:
        return "closed classes" in str(err)
    return False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
# Reducible: model 1 keeps its requests, and how they batch there depends on how they arrived.
@example(([[0.75, 0.25], [0.0, 1.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.001], [0.001]], None, 3))
def test_throughput_never_exceeds_every_model_running_flat_out(scenario):
    P, C, latency, max_batch, n = scenario
    model = ThroughputModel(P, C, latency, quantum_s=1e-3, max_batch=max_batch)
    try:
        result = model.optimize(n)
    except NotIrreducibleError:
        # Documented: raised when a candidate's chain has more than one closed class. The reference walk, which
        # shares no code with the model, must find such a candidate; an irreducible system must not raise.
        caps = model.spec.batch_caps(n)
        assert any(_has_several_closed_classes(P, C, latency, max_batch, n, b) for b in feasible_thresholds(caps, n))
        return
    bound = _max_rate(model, n)
    for cand in result.candidates:
        assert 0.0 <= cand.throughput_tok_s <= bound * (1 + 1e-9)
    assert result.throughput_tok_s == max(c.throughput_tok_s for c in result.candidates)


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.data(), st.booleans())
def test_transition_rows_sum_to_one(scenario, data, shared):
    P, C, latency, max_batch, n = scenario
    model = ThroughputModel(P, C, latency, quantum_s=1e-3, max_batch=max_batch)
    caps = model.spec.batch_caps(n)
    thresholds = data.draw(st.sampled_from(list(feasible_thresholds(caps, n))))
    rule = FixedThresholds(thresholds, caps)
    # Read off the exploration shared by all candidates, or off one made for this vector alone.
    universe = explore(model.spec, n, AnyFeasible(n, caps) if shared else rule)
    chain = chain_for(universe, rule)
    sums = np.asarray(chain.transitions.sum(axis=1)).ravel()
    np.testing.assert_allclose(sums, 1.0, atol=1e-12)
    assert (chain.transitions.data > 0).all()
    assert (chain.tau > 0).all()
