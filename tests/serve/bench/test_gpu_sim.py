"""The simulator's answer for the GPU pair at the operating points' shares (trserve.bench.gpu_sim), checked
against closed forms: a constant-latency model alone, and R2R's chain whose large share is its hand-off rate."""

from __future__ import annotations

import pytest

from trserve.bench.gpu_sim import compare, gpu_answer, r2r_shaped, simulate_chain
from trserve.config import load_config
from trserve.server.defaults import DEFAULT_CONFIG

TABLES = [[0.006] * 8, [0.0279] * 8]  # the R2R paper's A100 steps, flat in the batch


def test_the_large_model_alone_steps_every_request_every_step() -> None:
    alone = simulate_chain([[1.0]], [[1.0]], TABLES[-1:], 8, 64, 5000)
    # 8 requests, one token each per 27.9 ms step; a prefill step per 64 tokens (65 steps per 64 tokens).
    assert alone["throughput_tok_s"] == pytest.approx(8 / 0.0279 * 64 / 65, rel=0.02)
    assert alone["large_share"] == 1.0


@pytest.mark.parametrize("share", [0.5, 0.921, 0.982])
def test_r2r_shaped_chain_puts_its_share_on_the_large_model(share: float) -> None:
    P, C = r2r_shaped(share)
    assert simulate_chain(P, C, TABLES, 8, 64, 20000)["large_share"] == pytest.approx(share, abs=0.02)


def test_compare_reports_routed_lockstep_and_the_large_model_alone() -> None:
    P, C = r2r_shaped(0.35)  # the paper's own R2R statistics: routing pays on these latencies
    out = compare(P, C, TABLES, 8, 64, 10000)
    assert out["over_large_alone"]["routed_bstar"] > 1.0
    assert out["routed_bstar"]["throughput_tok_s"] >= out["routed_b1"]["throughput_tok_s"] * 0.97


def test_gpu_answer_covers_every_program_and_chain() -> None:
    emulated = load_config("configs/emulated-r2r-a100.yaml").model_dump(mode="json")
    bench = {"settings": {"max_tokens": 16}, "routing": {"r2r": {"P": [[0.2, 0.8], [0.9, 0.1]], "C": [[1, 0], [1, 1]]}}}
    points = {"r2r": {"params": {"threshold": 0.25}, "large_share": 0.98, "accuracy": 1.0},
              "citer": {"params": {"threshold": 0.55}, "large_share": 0.92, "accuracy": 0.95}}  # fmt: skip
    answer = gpu_answer(bench, points, emulated, [4], tokens=2000)
    assert answer["latencies_ms"] == {"small": 6.0, "large": 27.9}
    assert [(r["program"], r["chain"].split()[0]) for r in answer["rows"]] == [
        ("r2r", "measured"), ("r2r", "r2r-shaped"), ("citer", "r2r-shaped")]  # fmt: skip
    with pytest.raises(ValueError, match="emulated"):
        gpu_answer(bench, points, DEFAULT_CONFIG, [4])  # real engines: no latencies to simulate with


def test_a_measured_chain_that_misses_the_bench_share_is_not_simulated() -> None:
    """rstitch at its operating point hands off at admission on the bench's prompts: P never leaves the small
    model, yet the large one wrote every token. Simulating that P would answer for a system that never ran."""
    emulated = load_config("configs/emulated-r2r-a100.yaml").model_dump(mode="json")
    bench = {"settings": {"max_tokens": 16}, "routing": {"rstitch": {"P": [[1, 0], [0, 1]], "C": [[1, 1], [1, 1]]}},
             "runs": [{"system": "tokenrouter-b1", "router": "rstitch", "llm_token_fraction": 1.0}]}  # fmt: skip
    points = {"rstitch": {"params": {"tau": 4.0}, "large_share": 0.935, "accuracy": 0.99}}
    answer = gpu_answer(bench, points, emulated, [4], tokens=2000)
    assert [r["chain"].split()[0] for r in answer["rows"]] == ["r2r-shaped"]
    assert answer["skipped"][0]["bench_large_share"] == 1.0 and answer["skipped"][0]["simulated_large_share"] == 0.0
