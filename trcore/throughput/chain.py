"""One threshold vector's Markov chain, read off an explored universe of states.

For thresholds B every outcome row has exactly one launch decision; its decision row gives the next state.
The chain is the part of the universe reachable from the initial state along those transitions. All of it is
array work over the universe's rows, so reading off one candidate costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from trcore.throughput.rules import FixedThresholds
from trcore.throughput.states import IntArray
from trcore.throughput.universe import FloatArray, Universe


@dataclass(frozen=True)
class Chain:
    """Transition matrix over the reachable states (row 0: the initial state), with each state's epoch length
    in time units and expected committed tokens."""

    transitions: sp.csr_matrix
    tau: IntArray
    tokens: FloatArray

    @property
    def num_states(self) -> int:
        return int(self.transitions.shape[0])


def chain_for(universe: Universe, rule: FixedThresholds) -> Chain:
    """The chain of ``rule`` (whose decisions the universe must have followed), restricted to reachable states."""
    target = outcome_targets(universe, rule)
    owner = universe.outcome_state
    n = universe.num_states
    # Outcomes of states the rule never reaches may lack a matching decision: park them on their own state.
    cols = np.where(target >= 0, target, owner)
    full = sp.csr_matrix((universe.outcome_prob.copy(), cols, universe.outcome_ptr.copy()), (n, n))
    reach = np.sort(csgraph.breadth_first_order(full, 0, directed=True, return_predecessors=False))
    keep = np.zeros(n, dtype=bool)
    keep[reach] = True
    rows = keep[owner]
    if np.any(target[rows] < 0):
        raise RuntimeError("the explored states lack a launch decision of these thresholds")
    relabel = np.cumsum(keep) - 1
    ptr = universe.outcome_ptr
    counts = ptr[reach + 1] - ptr[reach]
    indptr = np.concatenate([[0], np.cumsum(counts)])
    sub = sp.csr_matrix((universe.outcome_prob[rows], relabel[target[rows]], indptr), (len(reach), len(reach)))
    sub.sum_duplicates()
    return Chain(sub, universe.tau[reach], universe.tokens[reach])


def outcome_targets(universe: Universe, rule: FixedThresholds) -> IntArray:
    """Per outcome row, the next state under ``rule`` (-1 where no candidate of the universe decides that way).

    The rule holds back exactly the holdable models whose waiting count is below its threshold; that subset,
    compressed onto the outcome's holdable models, is the position of its decision row.
    """
    position = np.zeros(len(universe.outcome_prob), dtype=np.int64)
    for limit, rank, threshold in zip(universe.hold_limit, universe.hold_rank, rule.effective, strict=True):
        position += (limit < threshold).astype(np.int64) << rank
    target: IntArray = universe.decision_target[universe.decision_start + position]
    return target
