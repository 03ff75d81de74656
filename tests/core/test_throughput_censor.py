"""Censoring a chain before its solve keeps tokens per second exactly, on random irreducible chains."""

import numpy as np
import pytest
import scipy.sparse as sp

from trcore.throughput.censor import eliminate_fill_free, skip_deterministic
from trcore.throughput.solve import stationary


def random_chain(seed, n, extra_edges, self_loops=True):
    """An irreducible chain: a cycle through every state plus random edges, random weights, some self-loops;
    about a third of the states keep only their cycle edge (a single successor)."""
    rng = np.random.default_rng(seed)
    rows, cols = list(range(n)), [(s + 1) % n for s in range(n)]
    branching = rng.random(n) < 0.66
    for _ in range(extra_edges):
        s = int(rng.integers(n))
        if branching[s]:
            rows.append(s)
            cols.append(int(rng.integers(n)) if self_loops else int((s + 1 + rng.integers(n - 1)) % n))
    weights = rng.random(len(rows)) + 0.05
    T = sp.csr_matrix((weights, (rows, cols)), shape=(n, n))
    T = sp.diags(1 / np.asarray(T.sum(axis=1)).ravel()) @ T
    return T.tocsr(), rng.random(n) * 3, rng.integers(1, 9, n).astype(float)


def ratio(T, tokens, tau):
    pi = stationary(T.tocsr())
    return pi @ tokens / (pi @ tau)


@pytest.mark.parametrize("seed", range(6))
def test_censoring_keeps_the_long_run_ratio(seed):
    T, tokens, tau = random_chain(seed, n=300, extra_edges=500)
    exact = ratio(T, tokens, tau)
    T1, tokens1, tau1 = skip_deterministic(T, tokens, tau)
    assert T1.shape[0] < T.shape[0]
    assert ratio(T1, tokens1, tau1) == pytest.approx(exact, rel=1e-11)
    T2, tokens2, tau2 = eliminate_fill_free(T1, tokens1, tau1)
    assert T2.shape[0] < T1.shape[0]
    assert T2.nnz <= T1.nnz
    np.testing.assert_allclose(np.asarray(T2.sum(axis=1)).ravel(), 1.0, atol=1e-12)
    assert ratio(T2, tokens2, tau2) == pytest.approx(exact, rel=1e-11)


def test_a_deterministic_cycle_becomes_one_state():
    n = 5
    T = sp.csr_matrix((np.ones(n), (range(n), [(s + 1) % n for s in range(n)])), shape=(n, n))
    T1, tokens, tau = skip_deterministic(T, np.arange(n, dtype=float), np.full(n, 2.0))
    assert T1.shape == (1, 1)
    assert tokens[0] / tau[0] == pytest.approx(10 / 10)


def test_eliminating_self_loop_states_scales_their_visits():
    # 0 -> 1 -> 0 where state 1 repeats itself with probability 0.75: it is visited 4 times per cycle.
    T = sp.csr_matrix(np.array([[0.0, 1.0], [0.25, 0.75]]))
    tokens, tau = np.array([1.0, 2.0]), np.array([1.0, 1.0])
    T1, tokens1, tau1 = eliminate_fill_free(T, tokens, tau)
    assert T1.shape == (1, 1)
    assert tokens1[0] / tau1[0] == pytest.approx((1 + 4 * 2) / (1 + 4))
