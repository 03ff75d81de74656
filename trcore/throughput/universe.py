"""Breadth-first exploration of the chain's states under a launch rule, one whole BFS level per array operation.

Each explored state has one *outcome* row per distinct arrival vector of its completion epoch (probability,
waiting counts after arrivals, which idle models' launch depends on the threshold) and each outcome row has
decision rows for the launch bitmasks the rule follows (bitmask, index of the resulting state; see
``rules.Choices``). Transition matrices for particular threshold
vectors are read off these arrays (``trcore.throughput.chain``) without exploring again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from trcore.errors import ConfigError
from trcore.throughput.rules import LaunchRule
from trcore.throughput.spec import ChainSpec
from trcore.throughput.states import IntArray, Layout, SplitTable, initial_rows, launch, next_epochs

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Universe:
    """Explored states (row 0: the initial state) and their transitions, as arrays.

    ``tau`` (time units to the next epoch) and ``tokens`` (expected committed tokens at it) are per state;
    ``outcome_state`` / ``decision_outcome`` give the owner of each outcome / decision row (sorted);
    ``decision_target`` is -1 for decisions no candidate makes.
    """

    states: IntArray
    tau: IntArray
    tokens: FloatArray
    outcome_state: IntArray
    outcome_prob: FloatArray
    outcome_waiting: IntArray
    outcome_holdable: BoolArray
    decision_outcome: IntArray
    decision_set: IntArray
    decision_target: IntArray

    @property
    def num_states(self) -> int:
        return len(self.states)

    @cached_property
    def outcome_ptr(self) -> IntArray:
        """Each state's outcome rows are ``outcome_ptr[s]:outcome_ptr[s + 1]``."""
        counts = np.bincount(self.outcome_state, minlength=self.num_states)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @cached_property
    def decision_start(self) -> IntArray:
        """Each outcome's first decision row."""
        counts = np.bincount(self.decision_outcome, minlength=len(self.outcome_prob))
        return (np.cumsum(counts) - counts).astype(np.int64)

    @cached_property
    def hold_limit(self) -> IntArray:
        """Per model (rows) and outcome (columns): a threshold above this holds the launch back (holdable
        models: their waiting count; others: never)."""
        never = np.iinfo(np.int64).max
        return np.ascontiguousarray(np.where(self.outcome_holdable, self.outcome_waiting, never).T)

    @cached_property
    def hold_rank(self) -> IntArray:
        """Per model and outcome: how many holdable models precede it (its bit in a compressed subset)."""
        before: IntArray = np.cumsum(self.outcome_holdable, axis=1) - self.outcome_holdable
        return np.ascontiguousarray(before.T.astype(np.int64))


@dataclass(frozen=True)
class _Level:
    tau: IntArray
    tokens: FloatArray
    outcome_state: IntArray
    outcome_prob: FloatArray
    outcome_waiting: IntArray
    outcome_holdable: BoolArray
    decision_outcome: IntArray
    decision_set: IntArray
    next_rows: IntArray


#: Default cap on explored states: past it memory (about 1 kB per state with its transitions) and time run away.
MAX_STATES = 1_000_000


def explore(spec: ChainSpec, num_requests: int, rule: LaunchRule, max_states: int = MAX_STATES) -> Universe:
    """Every state reachable from the initial one when launches follow ``rule`` (``ConfigError`` past
    ``max_states``)."""
    layout = Layout.of(spec, num_requests)
    splits = SplitTable(spec.P)
    per_step = np.asarray(spec.tokens_per_request_step, dtype=np.float64)
    index = _StateIndex(layout)
    frontier = index.resolve(initial_rows(layout))[1]
    parts: list[tuple[_Level, IntArray]] = []
    first_state = first_outcome = 0
    while len(frontier):
        level = _expand(frontier, layout, splits, rule, per_step)
        targets = np.full(len(level.decision_set), -1, dtype=np.int64)
        targets[level.decision_set >= 0], new_rows = index.resolve(level.next_rows)
        parts.append((_shift(level, first_state, first_outcome), targets))
        first_state += len(frontier)
        first_outcome += len(level.outcome_prob)
        frontier = new_rows
        if first_state + len(frontier) > max_states:
            raise ConfigError(
                "concurrency",
                f"{num_requests} requests give more than {max_states} states: use method 'sampled' (or 'auto'), "
                "fewer requests, a coarser quantum or smaller max batches",
            )

    def cat(name: str) -> Any:
        return np.concatenate([getattr(level, name) for level, _ in parts])

    return Universe(
        states=index.rows(),
        tau=cat("tau"),
        tokens=cat("tokens"),
        outcome_state=cat("outcome_state"),
        outcome_prob=cat("outcome_prob"),
        outcome_waiting=cat("outcome_waiting"),
        outcome_holdable=cat("outcome_holdable"),
        decision_outcome=cat("decision_outcome"),
        decision_set=cat("decision_set"),
        decision_target=np.concatenate([targets for _, targets in parts]),
    )


def _expand(frontier: IntArray, layout: Layout, splits: SplitTable, rule: LaunchRule, per_step: FloatArray) -> _Level:
    """One BFS level: completion epochs, routing splits (shared per set of completing batches), launches."""
    epochs = next_epochs(frontier, layout.num_models)
    _, first, which = np.unique(layout.encode_batches(epochs.completing), return_index=True, return_inverse=True)
    tables = [splits.arrivals(tuple(int(b) for b in epochs.completing[row])) for row in first]
    sizes = np.asarray([len(p) for _, p in tables], dtype=np.int64)
    counts = sizes[which]
    owner = np.repeat(np.arange(len(frontier), dtype=np.int64), counts)
    within = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    split_row = (np.cumsum(sizes) - sizes)[which][owner] + within
    waiting = epochs.waiting[owner] + np.concatenate([a for a, _ in tables])[split_row]
    choices = rule.choices(waiting, epochs.batches[owner] == 0)
    made = choices.launch_set >= 0
    dec_outcome, dec_set = choices.row[made], choices.launch_set[made]
    dec_state = owner[dec_outcome]
    next_rows = launch(layout, waiting[dec_outcome], epochs.batches[dec_state], epochs.residuals[dec_state], dec_set)
    return _Level(
        tau=epochs.tau,
        tokens=epochs.completing @ per_step,
        outcome_state=owner,
        outcome_prob=np.concatenate([p for _, p in tables])[split_row],
        outcome_waiting=waiting,
        outcome_holdable=choices.holdable,
        decision_outcome=choices.row,
        decision_set=choices.launch_set,
        next_rows=next_rows,
    )


def _shift(level: _Level, first_state: int, first_outcome: int) -> _Level:
    """Renumber a level's owner indices from level-local to global."""
    return replace(
        level,
        outcome_state=level.outcome_state + first_state,
        decision_outcome=level.decision_outcome + first_outcome,
    )


class _StateIndex:
    """Numbers states in order of discovery; keys are kept sorted for vectorized look-up."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._keys = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.int64)
        self._rows: list[IntArray] = []
        self._count = 0

    def resolve(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """Indices of ``rows`` (new states get the next numbers) and the new states' rows in index order."""
        unique, first, which = np.unique(self._layout.encode(rows), return_index=True, return_inverse=True)
        pos = np.searchsorted(self._keys, unique)
        known = pos < len(self._keys)
        known[known] = self._keys[pos[known]] == unique[known]
        ids = np.empty(len(unique), dtype=np.int64)
        ids[known] = self._ids[pos[known]]
        fresh = np.flatnonzero(~known)
        fresh = fresh[np.argsort(first[fresh], kind="stable")]
        ids[fresh] = self._count + np.arange(len(fresh), dtype=np.int64)
        self._count += len(fresh)
        self._keys = np.insert(self._keys, pos[~known], unique[~known])
        self._ids = np.insert(self._ids, pos[~known], ids[~known])
        new_rows = rows[first[fresh]]
        self._rows.append(new_rows)
        return ids[which], new_rows

    def rows(self) -> IntArray:
        return np.concatenate(self._rows)
