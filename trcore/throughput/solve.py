"""Stationary solve of a chain and the long-run committed tokens per second it implies.

Only the chain's closed class carries stationary mass (the initial state may be transient); a chain with more
than one closed class has no unique stationary law and is reported as such. Before the sparse LU, states with
a single successor are censored out exactly (see ``skip_deterministic``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from trcore.errors import NotIrreducibleError
from trcore.throughput.chain import Chain
from trcore.throughput.states import IntArray
from trcore.throughput.universe import FloatArray


def throughput_tok_s(chain: Chain, unit_s: float) -> float:
    """T = sum_s pi(s) tokens(s) / sum_s pi(s) tau(s), with tau in seconds."""
    closed = closed_class(chain)
    transitions = chain.transitions
    if len(closed) < chain.num_states:
        transitions = transitions[closed][:, closed].tocsr()
    tokens, tau = chain.tokens[closed], chain.tau[closed].astype(np.float64)
    transitions, tokens, tau = skip_deterministic(transitions, tokens, tau)
    pi = stationary(transitions)
    return float(pi @ tokens / (pi @ tau * unit_s))


def closed_class(chain: Chain) -> IntArray:
    """Indices of the states of the chain's unique closed class."""
    num_classes, label = csgraph.connected_components(chain.transitions, directed=True, connection="strong")
    if num_classes == 1:
        return np.arange(chain.num_states)
    coo = chain.transitions.tocoo()
    leaves = label[coo.row] != label[coo.col]
    is_open = np.zeros(num_classes, dtype=bool)
    is_open[label[coo.row[leaves]]] = True
    closed = np.flatnonzero(~is_open)
    if len(closed) > 1:
        sizes = ", ".join(str(int(np.sum(label == c))) for c in closed[:5])
        raise NotIrreducibleError(
            f"the chain has {len(closed)} closed classes (sizes {sizes}{', ...' if len(closed) > 5 else ''}): "
            "the long-run throughput depends on chance early on, so it has no single value"
        )
    return np.flatnonzero(label == closed[0])


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


def stationary(transitions: sp.csr_matrix) -> FloatArray:
    """Stationary distribution of an irreducible stochastic matrix.

    Fixes pi_0 = 1 and solves the other balance equations, ``(I - T^T) pi = 0`` without its first row and
    column: that block of an irreducible chain is a nonsingular M-matrix, diagonally dominant by columns, so LU
    without pivoting is stable and a fill-reducing symmetric ordering (minimum degree on A + A^T) applies.
    """
    n = transitions.shape[0]
    if n == 1:
        return np.ones(1)
    balance = (sp.identity(n, format="csc") - transitions.T).tocsc()
    block = balance[1:, 1:].tocsc()
    rhs = -balance[1:, 0].toarray().ravel()
    lu = spla.splu(block, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    pi = np.concatenate([[1.0], lu.solve(rhs)])
    return np.asarray(pi / pi.sum(), dtype=np.float64)
