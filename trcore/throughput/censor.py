"""Exact censoring of an irreducible chain onto fewer states, before its stationary solve.

Watching a chain only while it is in a subset R of its states gives another irreducible chain (the censored
chain) whose stationary law is the original one restricted to R, renormalized. Charging each censored
transition the expected tokens and time spent outside R on the way, the renewal-reward theorem keeps tokens
per second unchanged. Both reductions here only ever remove matrix entries, so the LU that follows is smaller.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from trcore.throughput.universe import FloatArray

Censored = tuple[sp.csr_matrix, FloatArray, FloatArray]


def skip_deterministic(
    transitions: sp.csr_matrix, tokens: FloatArray, tau: FloatArray
) -> tuple[sp.csr_matrix, FloatArray, FloatArray]:
    """Censor an irreducible chain on its states with more than one successor.

    A state with a single successor is always left the same way, so each transition into it is redirected
    to the end of its deterministic path, whose tokens and time are charged to the transition. By the
    renewal-reward theorem the censored chain has the same tokens per second. Paths are followed by pointer
    doubling. A chain with no branching state is one deterministic cycle: it is returned as a single state.
    """
    n = transitions.shape[0]
    indptr, indices = transitions.indptr, transitions.indices
    single = np.diff(indptr) == 1
    if not single.any():
        return transitions, tokens, tau
    if single.all():
        return sp.csr_matrix(np.ones((1, 1))), np.array([tokens.sum()]), np.array([tau.sum()])
    nxt = np.where(single, indices[np.minimum(indptr[:-1], len(indices) - 1)], np.arange(n))
    path_tokens, path_tau = np.where(single, tokens, 0.0), np.where(single, tau, 0.0)
    for _ in range(n.bit_length() + 1):  # paths are shorter than n, each round doubles the covered length
        if not single[nxt].any():
            break
        path_tokens = path_tokens + path_tokens[nxt]
        path_tau = path_tau + path_tau[nxt]
        nxt = nxt[nxt]
    else:
        raise RuntimeError("a deterministic path never branches: the chain is not irreducible")
    branching = np.flatnonzero(~single)
    rows = transitions[branching]
    relabel = np.cumsum(~single) - 1
    new_tokens, new_tau = tokens[branching] + rows @ path_tokens, tau[branching] + rows @ path_tau
    censored = sp.csr_matrix((rows.data.copy(), relabel[nxt[rows.indices]], rows.indptr.copy()), (len(branching),) * 2)
    censored.sum_duplicates()
    return censored, new_tokens, new_tau


def eliminate_fill_free(
    transitions: sp.csr_matrix, tokens: FloatArray, tau: FloatArray, max_rounds: int = 8
) -> Censored:
    """Censor out, round after round, states whose removal adds no matrix entries.

    Removing state s links each of its ``a`` predecessors to each of its ``b`` successors (self-loops aside):
    at most ``a * b`` new entries for the ``a + b`` removed, so none are added when ``(a - 1)(b - 1) <= 1``.
    Each round removes such states that are pairwise non-adjacent (ties broken by a fixed pseudo-random
    priority), so one matrix product does it; a self-loop of probability d scales the state's row by
    1 / (1 - d) (the expected number of consecutive visits). Stops when a round removes under 3% of the states.
    """
    for _ in range(max_rounds):
        n = transitions.shape[0]
        drop = _fill_free_set(transitions)
        if drop.sum() < max(1, 0.03 * n) or drop.sum() >= n:
            break
        keep, gone = np.flatnonzero(~drop), np.flatnonzero(drop)
        stay = 1.0 / (1.0 - transitions.diagonal()[gone])
        rows = transitions[keep]
        into_gone = (rows[:, gone] @ sp.diags(stay)).tocsr()
        out_of_gone = transitions[gone][:, keep]
        tokens = tokens[keep] + into_gone @ tokens[gone]
        tau = tau[keep] + into_gone @ tau[gone]
        transitions = (rows[:, keep] + into_gone @ out_of_gone).tocsr()
    return transitions, tokens, tau


def _fill_free_set(transitions: sp.csr_matrix) -> np.ndarray:
    """Pairwise non-adjacent states whose removal adds no entries."""
    n = transitions.shape[0]
    coo = transitions.tocoo()
    off = coo.row != coo.col
    row, col = coo.row[off], coo.col[off]
    out_deg = np.bincount(row, minlength=n)
    in_deg = np.bincount(col, minlength=n)
    candidate = (in_deg - 1) * (out_deg - 1) <= 1
    priority = (np.arange(n, dtype=np.int64) * 2654435761) % 4294967291
    both = candidate[row] & candidate[col]
    loses = np.zeros(n, dtype=bool)
    loses[row[both & (priority[col] > priority[row])]] = True
    loses[col[both & (priority[row] > priority[col])]] = True
    return candidate & ~loses
