"""calibration/gpu_profile.py on CPU with a tiny Qwen3 shape: profile written, schema-valid, fits usable."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trsim.fit import LatencySample, fit_latency_model
from trsim.profile import latency_from_profile, load_profile

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "calibration" / "gpu_profile.py"
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def load_script():
    """The script as a module (registered, since its dataclasses look their module up)."""
    name = "calibration_gpu_profile"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def shapes_dir(tmp_path):
    shapes = tmp_path / "shapes"
    shapes.mkdir()
    (shapes / "tiny-qwen3.json").write_text(json.dumps(TINY_QWEN3))
    (shapes / "not-a-config.json").write_text(json.dumps({"pairs": []}))  # ignored: no model_type
    return shapes


def run_script(*args, without=()):
    """Run the script on CPU; ``without`` names packages to make unimportable (a GPU machine may lack them)."""
    argv = [str(SCRIPT), "--device", "cpu", "--threads", "1", *args]
    code = (
        f"import sys, runpy; sys.modules.update(dict.fromkeys({list(without)!r})); sys.argv = {argv!r}; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_profiles_tiny_shape_on_cpu_into_a_valid_profile(shapes_dir, tmp_path):
    out = tmp_path / "profiles"
    grid = ["--batch-sizes", "1,2,3", "--context-lens", "8,32,5000", "--extend-tokens", "4", "--extend-context-lens",
            "0,8", "--extend-batch-sizes", "1,2", "--repeats", "2", "--warmup", "1"]  # fmt: skip
    done = run_script("--shapes-dir", str(shapes_dir), "--out-dir", str(out), "--budget-s", "120", *grid)
    assert done.returncode == 0, done.stderr
    path = out / f"cpu-{os.cpu_count()}core" / "tiny-qwen3.json"
    profile = load_profile(path)  # validates against the schema
    assert profile.llm == "tiny-qwen3" and profile.backend.endswith("StaticCache, float32, eager")
    cells = {(s.batch_size, s.context_tokens, s.extend_tokens) for s in profile.samples}
    decode = {(b, b * (ctx + 1), 0) for b in (1, 2, 3) for ctx in (8, 32)}
    extend = {(b, b * (ctx + 4), b * 3) for b in (1, 2) for ctx in (0, 8)}
    assert cells == decode | extend
    assert len(profile.samples) == 2 * len(cells) and all(s.latency_s > 0 for s in profile.samples)
    fits = [profile.fit, *profile.other_fits]
    assert {f.model for f in fits} == {"linear", "quadratic"} and all(f.mape >= 0 for f in fits)
    assert profile.fit.mape == min(f.mape for f in fits)
    machine = profile.model_dump()["machine"]
    assert machine["tag"] == f"cpu-{os.cpu_count()}core" and machine["num_threads"] == 1
    assert "StaticCache" in machine["method"] and "random weights" in machine["method"]
    assert [s["cell"] for s in machine["skipped"]] == [f"decode b={b} ctx=5000 new=1" for b in (1, 2, 3)]
    assert all("max_position_embeddings" in s["reason"] for s in machine["skipped"])
    assert latency_from_profile(profile).predict(4, 400, 0) > 0


def test_runs_without_scipy_pydantic_and_simpy_using_the_numpy_fit(shapes_dir, tmp_path):
    out = tmp_path / "profiles"
    grid = ["--batch-sizes", "1,2,3", "--context-lens", "8,32", "--extend-tokens", "4", "--extend-context-lens", "8",
            "--extend-batch-sizes", "1,2", "--repeats", "1", "--warmup", "0"]  # fmt: skip
    missing = ("scipy", "pydantic", "simpy")  # the H200 image of 2026-12-04 lacked simpy and pydantic
    done = run_script("--shapes-dir", str(shapes_dir), "--out-dir", str(out), *grid, without=missing)
    assert done.returncode == 0, done.stderr
    assert "profile written unvalidated" in done.stderr
    profile = load_profile(out / f"cpu-{os.cpu_count()}core" / "tiny-qwen3.json")
    assert len(profile.samples) == 8 and "numpy fallback" in profile.machine.method
    assert {f.model for f in [profile.fit, *profile.other_fits]} == {"linear", "quadratic"}


def test_unknown_model_name_is_a_one_line_error(shapes_dir, tmp_path):
    done = run_script("--shapes-dir", str(shapes_dir), "--out-dir", str(tmp_path), "--models", "nope")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: models: unknown ['nope']; valid: tiny-qwen3"


def test_a_model_without_time_left_is_skipped_and_nothing_written(shapes_dir, tmp_path):
    out = tmp_path / "profiles"
    done = run_script("--shapes-dir", str(shapes_dir), "--out-dir", str(out), "--budget-s", "1")
    assert done.returncode == 1
    assert "[tiny-qwen3] skipped: no time left" in done.stderr
    assert not list(out.rglob("*.json"))


def test_failed_graph_capture_falls_back_to_eager_for_that_kind_only():
    import torch

    script = load_script()
    profiler = script.Profiler(script.Device(torch, "cpu"), script.parse_args([]))
    profiler.use_graphs = {"decode": True, "extend": True}  # as on a GPU; capture cannot work on this machine
    runner = lambda: None  # noqa: E731
    assert profiler._maybe_graph(runner, "extend") is runner
    assert profiler.use_graphs == {"decode": True, "extend": False}
    assert profiler.graph_notes[0].startswith("extend steps eager: CUDA graph capture failed")


def synthetic_samples(coefficients):
    a, b, c, d, e = coefficients
    samples = []
    for size in (1, 2, 4, 8, 16):
        for ctx in (100, 1000, 4000):
            for ext in (0, 64):
                latency = a + b * size + c * size * ctx + d * size * ext + e * size * size
                samples.append({"batch_size": size, "context_tokens": size * ctx, "extend_tokens": size * ext,
                                "latency_s": latency})  # fmt: skip
    return samples


def test_numpy_fallback_fit_recovers_known_coefficients_like_trsim_fit():
    script = load_script()
    truth = (2e-3, 1e-4, 3e-8, 2e-6, 5e-6)
    samples = synthetic_samples(truth)
    fallback = script.numpy_fit("quadratic", samples)
    reference = fit_latency_model("quadratic", [LatencySample(**s) for s in samples])
    for name, value in zip("abcde", truth, strict=True):
        assert fallback["coefficients"][name] == pytest.approx(value, rel=1e-6)
        assert reference.coefficients[name] == pytest.approx(value, rel=1e-4)
    assert fallback["mape"] < 1e-9


def test_numpy_fallback_keeps_coefficients_non_negative():
    script = load_script()
    samples = synthetic_samples((2e-3, 1e-4, 3e-8, 2e-6, 0.0))
    for s in samples:  # a batch curve that bends down: the unconstrained b**2 term would be negative
        s["latency_s"] -= 1e-6 * s["batch_size"] ** 2
    fit = script.numpy_fit("quadratic", samples)
    assert min(fit["coefficients"].values()) >= 0 and fit["coefficients"]["e"] == 0.0


@pytest.mark.parametrize(
    ("name", "tag"),
    [("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA GeForce RTX 4090", "rtx-4090")],
)
def test_hardware_tag_from_device_name(name, tag):
    assert load_script().tag_from_device_name(name) == tag
