"""A model's settings that its engine refuses at start-up (vLLM checks them only then, in the worker) reach the user
as one line naming the serve config's field, exit status 2, as any other bad setting: not a worker's traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory

from trcore.errors import ConfigError
from trserve.runtime import refusal
from trserve.server.defaults import default_config
from trserve.server.process import free_port

GIB = 1 << 30


def vllm_kv_refusal(available_gib: float, needed_gib: float, fits: int) -> ValueError:
    """The ValueError vLLM's own KV check raises for a cache of ``available_gib`` (``fits``: its estimate)."""
    with pytest.raises(ValueError) as caught:
        _check_enough_kv_cache_memory(int(available_gib * GIB), lambda: int(needed_gib * GIB), 2048, lambda _: fits)
    return caught.value


def test_vllms_kv_check_names_the_models_kv_cache_gib_with_what_it_holds_and_needs() -> None:
    error = refusal.settings_error(vllm_kv_refusal(0.05, 0.09, 1120), model=1)
    assert error.field == "models.1.kv_cache_gib"
    assert "0.05 GiB holds 1120 tokens" in error.problem and "max_model_len 2048" in error.problem
    assert "0.09 GiB needed" in error.problem and "gpu_memory_utilization" not in error.problem


def test_a_cache_that_holds_no_whole_request_says_so() -> None:
    error = refusal.settings_error(vllm_kv_refusal(0.001, 0.09, 0), model=0)
    assert error.field == "models.0.kv_cache_gib" and "holds no whole request" in error.problem


def test_a_refusal_it_does_not_know_names_the_model_and_vllms_first_line() -> None:
    error = refusal.settings_error(ValueError("dtype bfloat17 is not supported.\nmore detail"), model=1)
    assert error.field == "models.1" and error.problem.endswith("dtype bfloat17 is not supported.")


def test_the_announced_line_is_found_in_a_log_tail_and_nothing_else_is(capsys) -> None:
    refusal.announce(ConfigError("models.1.max_model_len", "65536 is more than the checkpoint's 8192; lower it"))
    line = capsys.readouterr().err.strip()
    tail = f"INFO starting\n[rank0]: {line}\nINFO exiting"  # a worker may prefix its lines
    found = refusal.find(tail)
    assert found is not None and found.field == "models.1.max_model_len" and "8192" in found.problem
    assert refusal.find("Traceback (most recent call last):\nValueError: boom") is None
    assert refusal.find(refusal.MARK + "{not json") is None


def run_with_a_tiny_cache(command: list[str], model: int, tmp_path: Path) -> list[str]:
    """``tokenrouter COMMAND -c CONFIG`` on the default config with model ``model``'s cache too small for one
    request (0.02 GiB: about 420 tokens against max_model_len 2048); asserts exit status 2 and returns the output."""
    data = default_config().model_dump(mode="json")
    data["models"][model]["kv_cache_gib"] = 0.02
    data["server"]["port"] = free_port()
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(data))
    run = subprocess.run(
        [sys.executable, "-m", "tokenrouter", *command, "-c", str(path)], capture_output=True, text=True, timeout=300
    )
    said = (run.stdout + run.stderr).strip().splitlines()
    assert run.returncode == 2, said[-5:]
    assert not any("Traceback" in line or "[rank0]" in line for line in said)
    return said


@pytest.mark.serve
def test_serve_with_a_cache_smaller_than_one_request_is_one_line_and_status_2(
    prepared_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    last = run_with_a_tiny_cache(["serve"], 1, tmp_path)[-1]
    assert last.startswith("error: models.1.kv_cache_gib: 0.02 GiB holds ") and "max_model_len 2048" in last


@pytest.mark.serve
def test_calibrate_with_a_cache_smaller_than_one_request_is_one_line_and_status_2(
    prepared_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "profiles"
    said = run_with_a_tiny_cache(["calibrate", "--out", str(out), "--batch-sizes", "1", "--repeats", "1"], 0, tmp_path)
    assert said[-1].startswith("error: models.0.kv_cache_gib: 0.02 GiB holds ") and not out.exists()
