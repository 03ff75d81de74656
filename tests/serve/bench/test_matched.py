"""Throughput at matched quality: bench rows carry the share and accuracy of the operating point they ran, read
here straight from the committed file (not through the code under test); vLLM's own server as a bench system."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trserve.bench.cells import Cell
from trserve.bench.client import LoadResult, committed_tokens
from trserve.bench.matched import matched_rows, matched_table, quality_for
from trserve.bench.report import run_item
from trserve.bench.systems import BENCH_SYSTEMS, ROUTER_PARAMS, SYSTEMS, check_names
from trserve.bench.vllm_server import vllm_server_args, vllm_server_environment
from trserve.server.defaults import DEFAULT_CONFIG, OPERATING_POINTS

ROOT = Path(__file__).resolve().parents[3]
POINTS = json.loads(OPERATING_POINTS.read_text())


def _cell(system: str, router: str, params: dict | None, tok_s: float, n: int = 8, base: dict = DEFAULT_CONFIG) -> Cell:
    """A bench cell as the runner fills it for a server of ``base`` that ran ``params``."""
    load = LoadResult(n, tok_s, 3.0, 4, ttft_s=[0.05], tpot_s=[0.04], e2e_s=[1.0])
    quality = quality_for(base, system, router, params)
    return Cell(system, router, n, loads=[load], stats=[[]], router_params=params, quality=quality)


def test_the_bench_runs_every_routed_program_at_its_committed_operating_point() -> None:
    # The committed points' parameters written out (docs/quality.md), not read from the file the bench reads.
    committed = {"rstitch": {"tau": 4.0, "tau_back": 0.0}, "r2r": {"threshold": 0.25}, "citer": {"threshold": 0.55}}
    for program, params in committed.items():
        assert ROUTER_PARAMS[program] == params, program


@pytest.mark.parametrize("program", ["rstitch", "r2r", "citer"])
def test_a_row_at_an_operating_point_carries_its_share_and_accuracy(program: str) -> None:
    point = POINTS[program]
    item = run_item(_cell("tokenrouter", program, dict(point["params"]), 100.0))
    assert item["quality"]["large_share"] == point["large_share"]
    assert item["quality"]["accuracy"] == point["accuracy"]
    assert item["quality"]["relative_accuracy"] == point["relative_accuracy"]
    assert item["router_params"] == point["params"]


def test_a_row_at_other_parameters_carries_no_quality() -> None:
    params = {k: v + 1.0 for k, v in POINTS["r2r"]["params"].items()}
    assert run_item(_cell("tokenrouter", "r2r", params, 100.0))["quality"] is None


def test_another_pair_carries_no_quality() -> None:
    """The points were measured on the default config's checkpoints: an emulated pair (or other checkpoints) has
    no measured quality, even with the same router parameters."""
    emulated = {"backend": "emulated", "models": [{"name": "small"}, {"name": "large"}]}
    assert run_item(_cell("llm-only", "none", None, 100.0, base=emulated))["quality"] is None
    other = {**DEFAULT_CONFIG, "models": [DEFAULT_CONFIG["models"][0], {**DEFAULT_CONFIG["models"][1], "path": "/x"}]}
    params = dict(POINTS["r2r"]["params"])
    assert run_item(_cell("tokenrouter", "r2r", params, 100.0, base=other))["quality"] is None


def test_matched_rows_compare_each_routed_row_with_the_large_model_alone() -> None:
    runs = [
        run_item(_cell("tokenrouter", "citer", dict(POINTS["citer"]["params"]), 60.0)),
        run_item(_cell("tokenrouter", "r2r", {"threshold": 0.9}, 90.0)),  # not an operating point: left out
        run_item(_cell("lockstep", "citer", dict(POINTS["citer"]["params"]), 50.0)),  # not a TokenRouter row
        run_item(_cell("llm-only", "none", None, 120.0)),
        run_item(_cell("vllm-server", "none", None, 150.0)),
    ]
    rows = matched_rows(runs)
    assert [(r["system"], r["router"]) for r in rows] == [("tokenrouter", "citer"), ("llm-only", "none"),
                                                        ("vllm-server", "none")]  # fmt: skip
    citer, llm, vllm = rows
    assert citer["over_llm_only"] == pytest.approx(0.5) and citer["over_vllm_server"] == pytest.approx(0.4)
    # Large-only on the quality set: its accuracy is every point's accuracy / relative accuracy.
    large_only = POINTS["citer"]["accuracy"] / POINTS["citer"]["relative_accuracy"]
    assert llm["accuracy"] == pytest.approx(large_only) and llm["large_share"] == 1.0
    assert vllm["accuracy"] == pytest.approx(large_only) and "not run on the question set" in vllm["note"]
    table = matched_table(rows)
    assert f"| 8 | tokenrouter | citer threshold {POINTS['citer']['params']['threshold']} |" in table
    assert "0.50x | 0.40x |" in table


def test_vllm_metrics_count_generated_tokens_over_every_engine() -> None:
    before = (
        '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0",model_name="m"} 10.0\n'
    )
    after = (
        'vllm:generation_tokens_total{engine="0",model_name="m"} 74.0\nvllm:generation_tokens_total{engine="1"} 6.0\n'
    )
    assert committed_tokens(after, before) == 70.0
    ours = 'tokenrouter_tokens_total{model="small"} 5.0\ntokenrouter_tokens_total{model="large"} 7.0\n'
    assert committed_tokens(ours, "") == 12.0


def test_vllm_server_is_given_what_llm_only_is_given(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    large = {**DEFAULT_CONFIG["models"][-1], "path": str(tmp_path)}
    args = vllm_server_args(large, 8123)
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs["--model"] == str(tmp_path) and pairs["--dtype"] == large["dtype"] == "float32"
    assert pairs["--max-model-len"] == str(large["max_model_len"]) and pairs["--port"] == "8123"
    assert pairs["--served-model-name"] == "tokenrouter"  # the name the bench's client asks for
    cores = sorted(os.sched_getaffinity(0))  # every core, as llm-only's engine gets them
    env = vllm_server_environment(large)
    assert env["OMP_NUM_THREADS"] == str(len(cores))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, cores))


def test_vllm_server_needs_a_checkpoint() -> None:
    from trcore.errors import ConfigError

    with pytest.raises(ConfigError, match="vllm-server needs a model checkpoint"):
        vllm_server_args({"name": "large", "emulated": {"latency_ms": 27.9}}, 8123)


def test_vllm_server_is_a_bench_system_but_has_no_serve_config() -> None:
    assert "vllm-server" in BENCH_SYSTEMS and "vllm-server" not in SYSTEMS
    check_names(["vllm-server", "llm-only"], ["citer"])


def test_vllm_server_on_an_emulated_config_is_one_line_error() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "tokenrouter.cli", "bench", "--systems", "vllm-server", "--config",
                           str(ROOT / "configs/emulated-r2r-a100.yaml")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "vllm-server" in proc.stderr
