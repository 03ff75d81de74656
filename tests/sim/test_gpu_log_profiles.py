"""calibration/gpu_log_profiles.py: profiles rebuilt from a gpu_profile.py log (hand-made log, known latencies)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trsim.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "calibration" / "gpu_log_profiles.py"
# Latencies from 4 ms + 0.1 ms per request + 1 us per context token (context = batch * (cached + new)).
LOG = """\
[tiny] decode b=1 ctx=128 new=1: 4.229 ms median, spread 1.0% (5 reps)
[tiny] decode b=2 ctx=128 new=1: 4.458 ms median, spread 1.0% (5 reps)
[tiny] decode b=4 ctx=512 new=1: 6.452 ms median, spread 1.0% (5 reps)
note: an unrelated line
[tiny] decode b=8 ctx=512 new=1: 8.904 ms median, spread 1.0% (5 reps)
[tiny] prefill b=1 ctx=0 new=64: 4.164 ms median, spread 1.0% (5 reps)
[tiny] extend b=4 ctx=2048 new=16: 12.656 ms median, spread 1.0% (5 reps)
[tiny] decode b=256 ctx=8192 new=1: skipped (memory: needs ~224.3 GiB, 136.9 GiB free)
[tiny] failed: ModuleNotFoundError: No module named 'simpy'
[other] decode b=1 ctx=128 new=1: skipped (budget: the model's share of the time budget is spent)
"""


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=REPO)


@pytest.fixture
def shapes(tmp_path):
    folder = tmp_path / "shapes"
    folder.mkdir()
    config = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}  # fmt: skip
    (folder / "tiny.json").write_text(json.dumps(config))
    return folder


def test_log_becomes_a_profile_with_one_sample_per_timed_cell(tmp_path, shapes):
    log = tmp_path / "run.log"
    log.write_text(LOG)
    done = run(log, "--hardware-tag", "h200", "--accelerator", "NVIDIA H200", "--out-dir", tmp_path / "out",
               "--shapes-dir", shapes)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out" / "h200" / "other.json").exists()  # no timed cell, no profile
    profile = load_profile(tmp_path / "out" / "h200" / "tiny.json")
    got = [(s.batch_size, s.context_tokens, s.extend_tokens, round(s.latency_s * 1e3, 3)) for s in profile.samples]
    assert got == [(1, 129, 0, 4.229), (2, 258, 0, 4.458), (4, 2052, 0, 6.452), (8, 4104, 0, 8.904),
                   (1, 64, 63, 4.164), (4, 8256, 60, 12.656)]  # fmt: skip
    linear = next(f for f in [profile.fit, *profile.other_fits] if f.model == "linear")
    assert linear.coefficients == pytest.approx({"a": 4e-3, "b": 1e-4, "c": 1e-6}, rel=1e-3)
    machine = profile.model_dump()["machine"]
    assert machine["accelerator"] == "NVIDIA H200" and "run.log" in machine["method"]
    assert machine["skipped"] == [{"cell": "decode b=256 ctx=8192 new=1", "reason": "memory: needs ~224.3 GiB, "
                                   "136.9 GiB free"}]  # fmt: skip
    assert machine["model_shape"]["layers"] == 2


def test_missing_log_or_no_timed_cells_is_a_one_line_error(tmp_path):
    missing = run(tmp_path / "nope.log", "--hardware-tag", "x", "--accelerator", "y")
    empty = tmp_path / "empty.log"
    empty.write_text("nothing timed\n")
    none = run(empty, "--hardware-tag", "x", "--accelerator", "y", "--out-dir", tmp_path)
    for done in (missing, none):
        assert done.returncode == 2 and done.stderr.startswith("error: log:") and done.stderr.count("\n") == 1
