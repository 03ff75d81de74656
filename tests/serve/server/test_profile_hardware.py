"""No silent fallback to another machine's numbers: a calibration profile is used only on the hardware that
measured it (CPU model, or GPU name), and bench predictions refuse more models than they can predict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trcore.errors import ConfigError
from trserve.bench import predict, window_stats
from trserve.config import ServeConfig
from trserve.hardware import check_profile_hardware, cpu_model, hardware_tag, local_gpu_name
from trserve.paths import calibration_dir
from trserve.server import thresholds

cpu_only = pytest.mark.skipif(local_gpu_name() is not None, reason="a GPU machine's profiles name its GPU")

COMMITTED = calibration_dir("profiles", "cpu-2core")


def tampered_profiles(tmp: Path, cpu: str | None) -> Path:
    """The committed profiles under ``tmp/<this machine's tag>/`` with their recorded CPU model replaced."""
    folder = tmp / hardware_tag()
    folder.mkdir(parents=True)
    for src in COMMITTED.glob("*.json"):
        data = json.loads(src.read_text())
        if cpu is None:
            data["machine"].pop("cpu_model")
        else:
            data["machine"]["cpu_model"] = cpu
        (folder / src.name).write_text(json.dumps(data))
    return tmp


def auto_config(calibration: Path) -> ServeConfig:
    models = [{"name": "large", "path": "x"}, {"name": "small", "path": "y"}]
    auto = {"calibration_dir": str(calibration)}
    return ServeConfig.model_validate({"models": models, "batching": {"thresholds": "auto", "auto": auto}})


@cpu_only
def test_this_machines_profile_is_accepted():
    check_profile_hardware({"cpu_model": cpu_model()}, "p.json")


@cpu_only
def test_thresholds_auto_refuses_a_profile_of_another_cpu_naming_both(tmp_path):
    cfg = auto_config(tampered_profiles(tmp_path, "Intel Xeon Platinum 8480"))
    with pytest.raises(ConfigError) as err:
        thresholds.load_profile(cfg, 0)
    assert "Intel Xeon Platinum 8480" in str(err.value) and cpu_model() in str(err.value)


@cpu_only
def test_a_profile_that_records_no_cpu_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cpu_model missing"):
        thresholds.load_profile(auto_config(tampered_profiles(tmp_path, None)), 1)


@cpu_only
def test_bench_predictions_refuse_a_profile_of_another_cpu(tmp_path):
    folder = tampered_profiles(tmp_path, "Apple M2") / hardware_tag()
    with pytest.raises(ConfigError, match="Apple M2"):
        predict.checked_profile(folder / "large.json")
    shutil.rmtree(folder)
    committed = json.loads((COMMITTED / "large.json").read_text())["machine"]["cpu_model"]
    if committed == cpu_model():  # the committed profiles were measured on this kind of machine
        assert predict.checked_profile(COMMITTED / "large.json").machine is not None
    else:
        with pytest.raises(ConfigError, match=committed):
            predict.checked_profile(COMMITTED / "large.json")


def test_bench_predictions_refuse_more_than_two_models():
    stats = [window_stats.StepStats(10.0, 5.0, 0.5, 1.0, 9.0)] * 3
    with pytest.raises(ConfigError, match="at most 2 models"):
        window_stats.routing_matrices(stats)
    P, _ = window_stats.routing_matrices(stats[:2])
    assert len(P) == 2
