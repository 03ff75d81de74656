"""The step costs a vLLM subserver's ``cost`` spill policy prices with (trserve/runtime/memory_setup.py): read off
this machine's calibration profile (the folder ``batching.auto.calibration_dir`` names, as for ``thresholds:
auto``), and the policy's relative defaults when there is no profile or it was measured on other hardware."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from trcore import StepCost
from trserve.config import ServeConfig
from trserve.hardware import cpu_model, hardware_tag, local_gpu_name
from trserve.runtime.memory_setup import step_cost_of
from trsim.fit import LatencySample
from trsim.profile import make_profile, save_profile

#: The synthetic profile's step: 10 ms, 2 ms per request, 40 us per extend token (no context term).
BASE_S, PER_REQUEST_S, EXTEND_S = 0.010, 0.002, 4e-5


def write_profile(folder: Path, cpu: str) -> None:
    samples = [
        LatencySample(n, n * c, x, BASE_S + PER_REQUEST_S * n + EXTEND_S * x)
        for n in (1, 2, 4)
        for c in (0, 64)
        for x in (0, 16, 64)
    ]
    machine = {"description": "synthetic", "cpu_model": cpu, "accelerator": local_gpu_name()}
    folder.mkdir(parents=True, exist_ok=True)
    save_profile(make_profile("large", machine, samples, ("quadratic",)), folder / "large.json")


def spec(calibration: Path) -> SimpleNamespace:
    config = ServeConfig.model_validate(
        {"models": [{"name": "large", "path": "x"}], "batching": {"auto": {"calibration_dir": str(calibration)}}}
    )
    return SimpleNamespace(config=config)


def test_the_costs_come_from_this_machines_profile_in_the_configured_folder(tmp_path: Path) -> None:
    write_profile(tmp_path / hardware_tag(), cpu_model())
    cost = step_cost_of(spec(tmp_path), 0)
    assert cost.base_s == pytest.approx(BASE_S, rel=1e-3)
    assert cost.per_request_s == pytest.approx(PER_REQUEST_S, rel=1e-3)
    assert cost.extend_s == pytest.approx(EXTEND_S, rel=1e-3)


def test_another_machines_profile_or_none_gives_the_relative_defaults(tmp_path: Path, caplog) -> None:
    assert step_cost_of(spec(tmp_path), 0) == StepCost()
    write_profile(tmp_path / hardware_tag(), "Apple M2")
    with caplog.at_level(logging.WARNING):
        assert step_cost_of(spec(tmp_path), 0) == StepCost()
    assert "Apple M2" in caplog.text and str(tmp_path) in caplog.text
