"""The bench's simulator prediction is given the measured cell's requests and KV pools (issue 26): a pool that holds
few requests predicts well below memory-free serving, and exactly what the simulator gives with that pool."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from trcore import KVBudget
from trserve.bench.cells import Cell
from trserve.bench.client import Workload
from trserve.bench.predict import sim_prediction
from trserve.bench.sim_inputs import cell_inputs
from trsim.baselines import apply_baseline
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.kv import KVSimConfig
from trsim.latency import TableModel
from trsim.lengths import constant
from trsim.workload import WorkloadConfig

LATENCY_S = 0.01
N = 8
TOKENS = 4000
#: A 16-token prompt writing 32 tokens needs 3 blocks of 16 at its end: a 4-block pool holds one such request.
BLOCKS = 4


WORK = Workload(max_tokens=32)


def base(policy: str = "cost") -> dict[str, object]:
    """A one-model bench config (as ``ServeConfig.model_dump`` gives it) with ``memory.policy`` ``policy``."""
    return {"backend": "emulated", "memory": {"policy": policy},
            "models": [{"name": "m", "block_size": 16, "max_num_seqs": 64}]}  # fmt: skip


def cell(blocks_total: int | None) -> Cell:
    """A measured cell whose server reported ``blocks_total`` KV blocks for model ``m`` (None: no accounting)."""
    text = "" if blocks_total is None else f'tokenrouter_kv_blocks{{model="m",kind="total"}} {blocks_total}.0\n'
    out = Cell("tokenrouter-b1", "markov", N)
    out.loads.append(SimpleNamespace(metrics_after=text, metrics_before=""))  # type: ignore[arg-type]
    return out


def predict(inputs: object | None) -> float:
    return sim_prediction([[1.0]], [[1.0]], [[LATENCY_S] * N], N, [1], "b1", TOKENS, inputs=inputs)  # type: ignore[arg-type]


def test_a_small_pool_predicts_what_the_simulator_gives_that_pool_well_below_free_memory() -> None:
    measured = cell(BLOCKS)
    inputs = cell_inputs(WORK, base(), ["m"], measured)
    with_memory, free = predict(inputs), predict(None)
    # Memory free: N endless requests step together, N tokens per step.
    assert free == pytest.approx(N / LATENCY_S, rel=0.02)
    assert with_memory < free / 2
    workload = WorkloadConfig(prompt_tokens=constant(16), output_tokens=constant(32))
    config = markov_config([[1.0]], [[1.0]], [TableModel(list(range(1, N + 1)), [LATENCY_S] * N)], [1], N, workload,
                           seed=0)  # fmt: skip
    config = replace(config, kv=KVSimConfig((KVBudget(BLOCKS, 16, 64),), "cost"))
    direct = simulate(apply_baseline(config, "b1"), tokens=TOKENS, warmup_tokens=TOKENS // 10)
    assert with_memory == direct.throughput_tok_s
    assert measured.sim_inputs == {
        "requests": {"prompt_tokens": 16, "output_tokens": 32},
        "memory": {"spill": "cost", "budgets": [{"num_blocks": BLOCKS, "block_size": 16, "max_seqs": 64}]},
    }


@pytest.mark.parametrize(("policy", "blocks", "why"), [("off", BLOCKS, "memory.policy off"),
                                                       ("cost", None, "no KV pool reported by m")])  # fmt: skip
def test_memory_is_free_and_says_why_without_a_pool_or_a_policy(policy: str, blocks: int | None, why: str) -> None:
    measured = cell(blocks)
    inputs = cell_inputs(WORK, base(policy), ["m"], measured)
    assert inputs.kv is None
    assert measured.sim_inputs is not None and measured.sim_inputs["memory"] == f"free ({why})"
