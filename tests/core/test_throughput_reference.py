"""The fast throughput model against a slow, straightforward one written from docs/throughput-model.md alone.

The reference walks states one by one as tuples, enumerates multinomial splits from factorials and solves the
balance equations (one replaced by the normalization) with a plain sparse solve on the closed class. It shares
no code with trcore.throughput.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from trcore.throughput import ThroughputModel


def reference_throughput(P, C, latency_quanta, quantum_s, num_requests, thresholds, max_batch=None):
    """(throughput tok/s, number of reachable states). ``latency_quanta[i]``: int or list by batch size - 1."""
    m = len(P)
    caps = [num_requests if max_batch is None else min(max_batch[i], num_requests) for i in range(m)]

    def latency(i, b):
        table = latency_quanta[i] if isinstance(latency_quanta[i], list) else [latency_quanta[i]]
        return table[min(b, len(table)) - 1]

    def launch(k, b, r):
        for i in range(m):
            if b[i] == 0 and k[i] >= min(thresholds[i], caps[i]):
                size = min(k[i], caps[i])
                k[i], b[i], r[i] = k[i] - size, size, latency(i, size)
        return tuple(k + b + r)

    start = launch([num_requests] + [0] * (m - 1), [0] * m, [0] * m)
    order, index, edges, tokens, taus = [start], {start: 0}, {}, [], []
    for s in order:  # grows while we walk it: breadth-first
        k, b, r = s[:m], s[m : 2 * m], s[2 * m :]
        tau = min(r[i] for i in range(m) if b[i])
        done = [i for i in range(m) if b[i] and r[i] == tau]
        tokens.append(sum(b[i] * sum(P[i][j] * C[i][j] for j in range(m)) for i in done))
        taus.append(tau)
        row = edges.setdefault(index[s], {})
        for combo in itertools.product(*(_multinomial(b[i], P[i]) for i in done)):
            k2, b2, r2, prob = list(k), list(b), [x - tau if x else 0 for x in r], 1.0
            for i, (counts, q) in zip(done, combo, strict=True):
                prob *= q
                b2[i] = r2[i] = 0
                k2 = [x + y for x, y in zip(k2, counts, strict=True)]
            nxt = launch(k2, b2, r2)
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            row[index[nxt]] = row.get(index[nxt], 0.0) + prob
    closed = _closed_class(edges, len(order))
    pos = {s: n for n, s in enumerate(closed)}
    rows, cols, vals = [], [], []
    for s in closed:
        for t, p in edges[s].items():
            rows.append(pos[s])
            cols.append(pos[t])
            vals.append(p)
    n = len(closed)
    # Balance equations pi (T - I) = 0 with the last one replaced by sum(pi) = 1.
    A = (sp.csr_matrix((vals, (rows, cols)), shape=(n, n)).T - sp.identity(n)).tolil()
    A[n - 1, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = np.atleast_1d(spla.spsolve(A.tocsc(), rhs))
    num = sum(pi[pos[s]] * tokens[s] for s in closed)
    den = sum(pi[pos[s]] * taus[s] for s in closed) * quantum_s
    return num / den, len(order)


def _multinomial(n, probs):
    out = []
    for counts in itertools.product(range(n + 1), repeat=len(probs)):
        if sum(counts) != n or any(c and p == 0 for c, p in zip(counts, probs, strict=True)):
            continue
        prob = math.factorial(n)
        for c, p in zip(counts, probs, strict=True):
            prob = prob / math.factorial(c) * p**c
        out.append((counts, prob))
    return out


def _closed_class(edges, n):
    """The states of the only strongly connected component that no edge leaves."""
    rows = [s for s in range(n) for _ in edges[s]]
    cols = [t for s in range(n) for t in edges[s]]
    graph = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    _, label = csgraph.connected_components(graph, directed=True, connection="strong")
    leaving = {label[s] for s, t in zip(rows, cols, strict=True) if label[s] != label[t]}
    closed = sorted(set(label) - leaving)
    assert len(closed) == 1, f"reference: {len(closed)} closed classes"
    return [s for s in range(n) if label[s] == closed[0]]


R2R = ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])
THREE = ([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [1.0, 0.0, 0.0]], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def _seconds(quanta, quantum_s):
    return [[q * quantum_s for q in x] if isinstance(x, list) else x * quantum_s for x in quanta]


SCENARIOS = [
    # (P, C, latency in quanta, max batch, concurrency)
    (*R2R, [20, 93], None, 5),
    (*R2R, [6, 9], None, 6),
    (*R2R, [5, 5], None, 4),  # equal latencies: both models complete at once
    (*R2R, [[4, 5, 6], [9, 11, 14, 15]], None, 5),  # batch-dependent latency
    (*R2R, [3, 7], [2, 3], 5),  # max batch below the concurrency
    (*THREE, [3, 6, 14], None, 4),
    (*THREE, [[2, 3], 4, [7, 7, 8]], [3, 2, 4], 4),
    ([[0.5, 0.5], [0.3, 0.7]], [[1.0, 0.5], [2.0, 1.0]], [4, 7], None, 4),
]


@pytest.mark.parametrize(("P", "C", "quanta", "max_batch", "n"), SCENARIOS)
def test_optimize_matches_reference_on_every_candidate(P, C, quanta, max_batch, n):
    quantum = 1e-3
    model = ThroughputModel(P, C, _seconds(quanta, quantum), quantum, max_batch)
    result = model.optimize(n)
    assert result.candidates
    for cand in result.candidates:
        expect, num_states = reference_throughput(P, C, quanta, quantum, n, cand.thresholds, max_batch)
        assert cand.num_states == num_states, cand.thresholds
        assert cand.throughput_tok_s == pytest.approx(expect, rel=1e-9), cand.thresholds
    best = max(result.candidates, key=lambda c: c.throughput_tok_s)
    assert (result.thresholds, result.throughput_tok_s) == (best.thresholds, best.throughput_tok_s)


@pytest.mark.parametrize(("P", "C", "quanta", "max_batch", "n"), SCENARIOS[:4] + SCENARIOS[5:6])
def test_solve_matches_reference(P, C, quanta, max_batch, n):
    quantum = 2e-4
    model = ThroughputModel(P, C, _seconds(quanta, quantum), quantum, max_batch)
    thresholds = (2,) + (1,) * (len(P) - 1)
    res = model.solve(n, thresholds)
    expect, num_states = reference_throughput(P, C, quanta, quantum, n, thresholds, max_batch)
    assert res.num_states == num_states
    assert res.thresholds == thresholds
    assert res.throughput_tok_s == pytest.approx(expect, rel=1e-9)


def test_default_scenario_argmax_matches_reference():
    model = ThroughputModel(*R2R, [0.006, 0.0279], 1e-4)
    result = model.optimize(7)
    expect = {c.thresholds: reference_throughput(*R2R, [60, 279], 1e-4, 7, c.thresholds)[0] for c in result.candidates}
    assert result.thresholds == max(expect, key=expect.__getitem__)
    assert result.throughput_tok_s == pytest.approx(max(expect.values()), rel=1e-9)
