"""Stationary solve of a chain and the long-run committed tokens per second it implies.

Only the chain's closed class carries stationary mass (the initial state may be transient); a chain with more
than one closed class has no unique stationary law and is reported as such. Before the sparse LU, the chain is
censored exactly onto fewer states (``trcore.throughput.censor``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from trcore.errors import NotIrreducibleError
from trcore.throughput.censor import eliminate_fill_free, skip_deterministic
from trcore.throughput.chain import Chain
from trcore.throughput.states import IntArray
from trcore.throughput.universe import FloatArray

#: Fill-free elimination pays off before LUs that fill in a lot: large chains with dense rows (measured on
#: the benchmark scenarios: it saves ~40% of the LU time at 8+ entries per row, loses a little at ~7).
ELIMINATE_MIN_STATES = 2000
ELIMINATE_MIN_ROW_ENTRIES = 8.0


def throughput_tok_s(chain: Chain, unit_s: float) -> float:
    """T = sum_s pi(s) tokens(s) / sum_s pi(s) tau(s), with tau in seconds."""
    closed = closed_class(chain)
    transitions = chain.transitions
    if len(closed) < chain.num_states:
        transitions = transitions[closed][:, closed].tocsr()
    tokens, tau = chain.tokens[closed], chain.tau[closed].astype(np.float64)
    transitions, tokens, tau = skip_deterministic(transitions, tokens, tau)
    size = transitions.shape[0]
    if size >= ELIMINATE_MIN_STATES and transitions.nnz >= ELIMINATE_MIN_ROW_ENTRIES * size:
        transitions, tokens, tau = eliminate_fill_free(transitions, tokens, tau)
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
