"""What a bench cell's simulator prediction is given beside routing (P, C) and latencies: the cell's own requests
and, when its server kept KV accounting, its models' memory, as ``trserve.crossval.predict`` gives them.

Requests: each client's next request follows the previous one (closed loop), with the ``--lengths`` preset's prompt
and output distributions, else :data:`PROMPT_TOKENS`-token prompts writing ``--max-tokens`` tokens each.
Memory: each model's pool as the server reported it over the cell's windows (``tokenrouter_kv_blocks`` total, so
an emulated ``kv_tokens`` and vLLM's own KV capacity alike), the config's ``block_size`` and ``max_num_seqs``, and
``memory.policy``; free (no pool in the simulator) with ``policy: off`` or a model that reported no pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trcore import KVBudget
from trserve.bench.client import Workload
from trserve.bench.memory import cell_memory, window_memory
from trsim.kv import KVSimConfig
from trsim.lengths import LengthDist, constant
from trsim.workload import WorkloadConfig


class MeasuredCell(Protocol):
    """What this module reads and writes of a bench cell (``trserve.bench.cells.Cell``)."""

    sim_inputs: dict[str, Any] | None

    @property
    def loads(self) -> Sequence[Any]: ...


#: Prompt length (tokens) of the bench's short plain prompts without ``--lengths`` (as the open-loop prediction).
PROMPT_TOKENS = 16


@dataclass(frozen=True)
class SimInputs:
    """The simulated requests' (prompt, output) lengths and the models' memory (None: memory is free)."""

    prompt: LengthDist
    output: LengthDist
    kv: KVSimConfig | None
    #: What the bench JSON records of the requests (preset and scale, or the fixed lengths).
    requests: Mapping[str, Any]
    #: Why memory is free when ``kv`` is None.
    free_because: str = ""

    def workload(self, turnaround_s: float = 0.0) -> WorkloadConfig:
        """Closed-loop sessions of these requests, the next one ``turnaround_s`` after the previous one ended."""
        return WorkloadConfig(prompt_tokens=self.prompt, output_tokens=self.output, think_time_s=turnaround_s)

    def describe(self) -> dict[str, Any]:
        """The inputs as the bench JSON records them (``predicted_sim_inputs``)."""
        if self.kv is None:
            memory: Any = f"free ({self.free_because})"
        else:
            budgets = [{"num_blocks": b.num_blocks, "block_size": b.block_size, "max_seqs": b.max_seqs}
                       for b in self.kv.budgets]  # fmt: skip
            memory = {"spill": self.kv.spill, "budgets": budgets}
        return {"requests": dict(self.requests), "memory": memory}


def bench_requests(work: Workload) -> tuple[LengthDist, LengthDist, dict[str, Any]]:
    """The (prompt, output) distributions of the bench's requests and what the JSON records of them."""
    if work.lengths is not None:
        prompt, output = work.lengths.dists
        return prompt, output, {"lengths": work.lengths.preset, "scale": work.lengths.scale}
    return constant(PROMPT_TOKENS), constant(work.max_tokens), {"prompt_tokens": PROMPT_TOKENS,
                                                                "output_tokens": work.max_tokens}  # fmt: skip


def memory_for_sim(
    base: Mapping[str, Any], names: Sequence[str], memory: Mapping[str, Mapping[str, Any]] | None
) -> tuple[KVSimConfig | None, str]:
    """The simulator's memory for the models ``names`` of ``base`` given the cell's measured memory rows
    (``trserve.bench.memory.cell_memory``), or None and the reason it is free."""
    policy = (base.get("memory") or {}).get("policy", "off")
    if policy in ("off", False, None):
        return None, "memory.policy off"
    by_name = {m["name"]: m for m in base["models"]}
    missing = [n for n in names if int((memory or {}).get(n, {}).get("blocks_total", 0)) <= 0]
    if missing:
        return None, f"no KV pool reported by {', '.join(missing)}"
    assert memory is not None
    budgets = tuple(
        KVBudget(int(memory[n]["blocks_total"]), int(by_name[n]["block_size"]), int(by_name[n]["max_num_seqs"]))
        for n in names
    )
    return KVSimConfig(budgets, str(policy)), ""


def cell_inputs(work: Workload, base: Mapping[str, Any], names: Sequence[str], cell: MeasuredCell) -> SimInputs:
    """The inputs of ``cell`` (whose models are ``names``) from the bench's workload, its config ``base`` and the
    cell's measured windows, recorded on the cell (``sim_inputs``: what the bench JSON reports)."""
    prompt, output, requests = bench_requests(work)
    memory = cell_memory([window_memory(x.metrics_after, x.metrics_before) for x in cell.loads])
    kv, why = memory_for_sim(base, names, memory)
    inputs = SimInputs(prompt, output, kv, requests, why)
    cell.sim_inputs = inputs.describe()
    return inputs
