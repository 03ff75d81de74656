"""The memory grid of ``benchmarks/kv_emulated.py``: which cells, each cell's KV pool, its serve config and the
simulator run that predicts it (same latency profiles, routing P/C, lengths, N, pool and policy).

A cell is (routing, N, memory, system): memory ``roomy`` (the pool an A100-80G holds beside the 32B model at tp 2,
``calibration.engine.kv_capacity_tokens`` of the large model's profile) or ``2x`` / ``4x`` oversubscribed (the
working set N x mean footprint, prompt + output / 2, divided by 2 or 4, and never below the longest request so
every request can be admitted); system a spill policy of the routed pair (``cost``, ``lru``,
``admission-limit``) or ``llm-only`` (the large model alone with the same pool, policy ``cost``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trcore import KVBudget
from trserve.bench.requests import Lengths
from trsim.build import markov_config
from trsim.config import SimConfig
from trsim.kv import KVSimConfig
from trsim.profile import latency_from_profile, load_profile
from trsim.workload import WorkloadConfig

POLICIES = ("cost", "lru", "admission-limit")
SYSTEMS = (*POLICIES, "llm-only")
MEMORY = {"roomy": None, "2x": 2, "4x": 4}
BLOCK_SIZE = 16
MAX_NUM_SEQS = 256
#: Routings: the paper's R2R statistics, and one where visits to the large model are rare (1% of small steps) and
#: long (a visit lasts 20 steps on average).
ROUTINGS: dict[str, dict[str, list[list[float]]]] = {
    "r2r": {"P": [[0.65, 0.35], [1.0, 0.0]], "C": [[1.0, 0.0], [1.0, 0.0]]},
    "rare-long": {"P": [[0.99, 0.01], [0.05, 0.95]], "C": [[1.0, 0.0], [1.0, 1.0]]},
}


@dataclass(frozen=True)
class GridCell:
    routing: str
    concurrency: int
    memory: str
    system: str
    kv_tokens: int

    @property
    def key(self) -> str:
        return f"{self.routing}/N{self.concurrency}/{self.memory}/{self.system}"

    @property
    def policy(self) -> str:
        return "cost" if self.system == "llm-only" else self.system

    @property
    def model_names(self) -> list[str]:
        """The models this cell serves, small to large (``llm-only``: the large model alone)."""
        return ["large"] if self.system == "llm-only" else ["small", "large"]

    @property
    def client_routing(self) -> tuple[Any, Any] | None:
        """The (P, C) the bench's clients walk for each request's schedule; None for ``llm-only`` (one model)."""
        return None if self.system == "llm-only" else (ROUTINGS[self.routing]["P"], ROUTINGS[self.routing]["C"])


def footprint_tokens(lengths: Lengths) -> float:
    """A request's mean KV over its life: mean prompt + mean output / 2."""
    prompt, output = lengths.mean_lengths()
    return prompt + output / 2


def pool_tokens(memory: str, n: int, lengths: Lengths, roomy_tokens: int) -> int:
    """The KV pool of ``memory`` at concurrency ``n``, in whole blocks (see the module docstring)."""
    factor = MEMORY[memory]
    if factor is None:
        return roomy_tokens
    tokens = max(n * footprint_tokens(lengths) / factor, lengths.max_total_tokens)
    return int(-(-tokens // BLOCK_SIZE) * BLOCK_SIZE)


def cells_for(routing: str, n: int, lengths: Lengths, roomy_tokens: int, memories: Sequence[str],
              systems: Sequence[str]) -> list[GridCell]:  # fmt: skip
    """One (routing, N)'s cells: the roomy ones (``cost`` and ``llm-only``) first, then each tighter memory with
    the systems' order rotated by one per memory (so no system always runs first)."""
    out = []
    for k, memory in enumerate(memories):
        tokens = pool_tokens(memory, n, lengths, roomy_tokens)
        names = [s for s in systems if memory != "roomy" or s in ("cost", "llm-only")]
        names = names[k % len(names) :] + names[: k % len(names)]
        out += [GridCell(routing, n, memory, s, tokens) for s in names]
    return out


def serve_config(cell: GridCell, profiles: dict[str, Path], max_active: int) -> dict[str, Any]:
    """The serve config of ``cell``: emulated engines on the profiles with a pool of ``cell.kv_tokens``, routed by
    each request's own schedule (``schedule`` program), B = 1, ``memory.policy`` the cell's."""

    def model(name: str) -> dict[str, Any]:
        return {"name": name, "block_size": BLOCK_SIZE, "max_num_seqs": MAX_NUM_SEQS, "max_model_len": 4096,
                "emulated": {"profile": str(profiles[name]), "kv_tokens": cell.kv_tokens}}  # fmt: skip

    names = cell.model_names
    router = {"program": "markov", "params": {"P": [[1.0]], "seed": 0}} if cell.system == "llm-only" else {
        "program": "schedule", "params": {}}  # fmt: skip
    return {
        "mode": "routed", "backend": "emulated", "handoff": "session", "models": [model(n) for n in names],
        "entry_model": 0, "router": router, "batching": {"thresholds": [1] * len(names), "max_wait_ms": 20.0},
        "server": {"max_active_requests": max_active, "max_waiting_requests": 4 * max_active},
        "memory": {"policy": cell.policy},
    }  # fmt: skip


def sim_config(cell: GridCell, profiles: dict[str, Path], lengths: Lengths, seed: int = 1) -> SimConfig:
    """The simulator's twin of ``cell``: the same profiles' fits, the routing's P and C (the ``markov`` router),
    the lengths' distributions, closed loop at N, the same pool and policy."""
    prompt, output = lengths.dists
    workload = WorkloadConfig(prompt_tokens=prompt, output_tokens=output)
    names = cell.model_names
    latency = [latency_from_profile(load_profile(profiles[n])) for n in names]
    P, C = (
        ([[1.0]], [[1.0]]) if cell.system == "llm-only" else (ROUTINGS[cell.routing]["P"], ROUTINGS[cell.routing]["C"])
    )
    config = markov_config(P, C, latency, [1] * len(names), cell.concurrency, workload, seed=seed)
    budget = KVBudget.from_tokens(cell.kv_tokens, BLOCK_SIZE, MAX_NUM_SEQS)
    return replace(config, kv=KVSimConfig(tuple(budget for _ in names), cell.policy))


def answers_match(answers: dict[str, str], reference: dict[str, str]) -> dict[str, int]:
    """Requests answered in both runs, and how many of them have the same text."""
    common = set(answers) & set(reference)
    return {"compared": len(common), "identical": sum(answers[k] == reference[k] for k in common)}
