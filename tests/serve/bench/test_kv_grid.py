"""The memory grid of benchmarks/kv_emulated.py (trserve/bench/kv_grid.py) and its report's targets
(benchmarks/kv_emulated_report.py), on hand-worked cases; no server starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trserve.bench.kv_grid import (
    ROUTINGS,
    GridCell,
    answers_match,
    cells_for,
    footprint_tokens,
    pool_tokens,
    serve_config,
    sim_config,
)
from trserve.bench.requests import Lengths, request_body
from trserve.config import ServeConfig

ROOT = Path(__file__).resolve().parents[3]
PROFILES = {n: ROOT / "docs/bench-emulated/memory/profiles" / f"{n}.json" for n in ("small", "large")}
_spec = importlib.util.spec_from_file_location("kv_emulated_report", ROOT / "benchmarks/kv_emulated_report.py")
assert _spec is not None and _spec.loader is not None
_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_report)  # loaded from its file: no benchmarks/ on sys.path for every later import
summarize, targets = _report.summarize, _report.targets

LENGTHS = Lengths("short-reasoning", 0.125)


def test_pools_divide_the_working_set_in_whole_blocks_and_admit_the_longest_request() -> None:
    footprint = footprint_tokens(LENGTHS)
    assert pool_tokens("roomy", 64, LENGTHS, 299_356) == 299_356
    two = pool_tokens("2x", 64, LENGTHS, 299_356)
    assert two % 16 == 0 and 0 <= two - 64 * footprint / 2 < 16
    assert pool_tokens("4x", 64, LENGTHS, 299_356) < two
    # N = 2 at 4x would hold half a request: the pool is raised to the longest one (128 + 256 tokens).
    assert pool_tokens("4x", 2, LENGTHS, 299_356) == LENGTHS.max_total_tokens == 384


def test_roomy_memory_runs_only_the_default_and_llm_only_and_the_order_rotates() -> None:
    cells = cells_for(
        "r2r", 32, LENGTHS, 299_356, ["roomy", "2x", "4x"], ["cost", "lru", "admission-limit", "llm-only"]
    )
    assert [(c.memory, c.system) for c in cells[:2]] == [("roomy", "cost"), ("roomy", "llm-only")]
    assert [c.system for c in cells[2:6]] == ["lru", "admission-limit", "llm-only", "cost"]
    assert [c.system for c in cells[6:]] == ["admission-limit", "llm-only", "cost", "lru"]
    assert {c.kv_tokens for c in cells[2:6]} == {pool_tokens("2x", 32, LENGTHS, 299_356)}


@pytest.mark.parametrize("system", ["cost", "lru", "admission-limit", "llm-only"])
def test_every_cell_is_a_valid_serve_config_and_a_simulator_twin_with_the_same_pool(system: str) -> None:
    cell = GridCell("r2r", 8, "2x", system, 1024)
    cfg = ServeConfig.model_validate(serve_config(cell, PROFILES, 64))
    assert cfg.memory.policy == cell.policy and all(m.emulated and m.emulated.kv_tokens == 1024 for m in cfg.models)
    assert len(cfg.models) == (1 if system == "llm-only" else 2)
    assert cell.model_names == [m.name for m in cfg.models]  # what the cell's tools call each model's figures
    # the clients walk the routing's chain for each request's schedule; the large model alone has no choice to make
    assert cell.client_routing == (None if system == "llm-only" else (ROUTINGS["r2r"]["P"], ROUTINGS["r2r"]["C"]))
    twin = sim_config(cell, PROFILES, LENGTHS)
    assert twin.kv is not None and twin.kv.spill == cell.policy
    assert all(b.num_blocks == 64 and b.block_size == 16 for b in twin.kv.budgets)
    assert twin.workload.concurrency == 8 and twin.workload.output_tokens.maximum == 256


def test_answers_are_compared_on_the_requests_both_runs_finished() -> None:
    assert answers_match({"0.0": "a", "0.1": "b", "1.0": "c"}, {"0.0": "a", "0.1": "x"}) == {
        "compared": 2,
        "identical": 1,
    }


def _cell(memory: str, system: str, tok_s: float, sim: float, answers: dict[str, str]) -> dict[str, object]:
    return {"routing": "r2r", "concurrency": 32, "memory": memory, "system": system, "kv_tokens": 100,
            "throughput_tok_s": tok_s, "sim_tok_s": sim, "num_failed": 0, "answers": answers, "kv": None}  # fmt: skip


def test_targets_compare_the_default_with_the_better_simple_policy_and_each_cell_with_the_simulator() -> None:
    same, other = {"0.0": "a"}, {"0.0": "b"}
    cells = [_cell("roomy", "cost", 100, 100, same), _cell("2x", "cost", 60, 62, same),
             _cell("2x", "lru", 50, 50, same), _cell("2x", "admission-limit", 61, 50, other)]  # fmt: skip
    rows = summarize({"cells": cells})
    goals = targets(rows)
    assert goals["default_at_least_best_simple"]["cells"][0] == {"routing": "r2r", "N": 32, "memory": "2x",
                                                                 "cost": 60, "best_simple": 61, "ratio": 0.984,
                                                                 "met": False}  # fmt: skip
    assert goals["sim_within_5pct"] == {"met": False, "cells": 4, "off": 1, "worst": pytest.approx(0.22)}
    assert goals["answers_identical_to_roomy"] == {"met": False, "compared": 4, "identical": 3}
    assert goals["zero_failed"]["met"]


_twin_spec = importlib.util.spec_from_file_location("kv_emulated_stack", ROOT / "benchmarks/kv_emulated_stack.py")
assert _twin_spec is not None and _twin_spec.loader is not None
_twin = importlib.util.module_from_spec(_twin_spec)
_twin_spec.loader.exec_module(_twin)


def test_a_schedule_becomes_trace_steps_made_on_the_model_the_step_before_led_to() -> None:
    steps = _twin.schedule_steps([[1, True], [1, False], [0, False], [0, True]])
    assert [tuple(s) for s in steps] == [(0, 1, True), (1, 1, False), (1, 0, False), (0, 0, True)]


@pytest.mark.parametrize("system", ["cost", "llm-only"])
def test_the_window_twin_sends_the_requests_the_bench_sent(system: str) -> None:
    """Session k of the twin is client k mod N's (k // N)-th request: its lengths, and routed its schedule."""
    lengths = LENGTHS
    cell = GridCell("r2r", 4, "2x", system, 512)
    config = _twin.replay_sent(sim_config(cell, PROFILES, lengths), cell, lengths)
    routing = None if system == "llm-only" else (ROUTINGS["r2r"]["P"], ROUTINGS["r2r"]["C"])
    for k in (0, 3, 4, 9):
        body = request_body(lengths, k % 4, k // 4, routing)
        assert config.workload.pairs.pair(k) == (len(body["prompt"]), body["max_tokens"])
    if routing is None:
        assert config.router.program == "markov"  # a single model: nothing to replay but the lengths
        return
    assert config.router.program == "trace" and config.workload.tag_traces
    body = request_body(lengths, 1, 2, routing)  # session 9
    on_small = [tuple(d) for d in config.router.params["traces"][9][0]]
    steps = _twin.schedule_steps(body["routing_extra"]["schedule"])
    assert on_small == [(s.destination, s.kept) for s in steps if s.model == 0] and len(on_small) > 10


def test_another_arrival_order_moves_whole_client_streams() -> None:
    """Order 0 keeps the clients' order; another seed puts each client's whole stream in another place."""
    n, per_client = 4, 3
    sent = _twin.LengthPairs(tuple((c + 1, 10 * k + 1) for k in range(per_client) for c in range(n)))
    assert _twin.arrival_order(sent, n, 0) == sent
    shuffled = _twin.arrival_order(sent, n, 3).pairs
    firsts = [p for p, _ in shuffled[:n]]
    assert firsts != [1, 2, 3, 4]  # seed 3 does move them
    assert sorted(firsts) == [1, 2, 3, 4]
    for place, client in enumerate(firsts):  # the client at each place keeps its own k-th requests in order
        assert [shuffled[k * n + place] for k in range(per_client)] == [(client, 10 * k + 1) for k in range(per_client)]
