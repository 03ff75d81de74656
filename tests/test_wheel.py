"""The package works installed as a wheel, outside the repository: shipped data (prompts, models/ with its pairs) is
found, the offline commands run.

The wheel is built from this checkout and installed without dependencies into a fresh virtual environment; the
dependencies come from the test's own environment through a ``.pth`` path entry (installing them from an index
would make the test slow and networked; what is checked is the package, not pip's resolver). Commands run as
``python -m tokenrouter`` with the fresh environment's interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding only the built wheel; returns its bin directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # the checkout's files only: no stale build/ or egg-info folds old files in
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(source)],
        check=True, cwd=tmp,
    )  # fmt: skip
    (wheel,) = tmp.glob("tokenrouter-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    bin_dir = env_dir / "bin"
    site = Path(
        subprocess.run(
            [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True
    )
    return bin_dir


def run_in(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_wheel_ships_the_data_and_runs_from_outside_the_repository(installed: Path, tmp_path: Path) -> None:
    where = run_in(installed, tmp_path, "python", "-c", "import trserve, trsim.shapes as s; print(trserve.__file__)")
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout
    data = (
        "from trserve.paths import MODELS_DIR, PROMPTS_DIR, SHAPES_DIR; from trsim.pairs import load_pair;"
        "print(MODELS_DIR); print(load_pair('local-smollm2').router_path('r2r'));"
        "print(sorted(p.name for d in (PROMPTS_DIR, SHAPES_DIR) for p in d.iterdir()))"
    )
    shipped = run_in(installed, tmp_path, "python", "-c", data)
    assert shipped.returncode == 0, shipped.stderr
    models_dir, router, names = shipped.stdout.splitlines()
    assert models_dir.endswith("site-packages/trserve/models") and router.startswith(models_dir)
    for name in ("routing.jsonl", "DeepSeek-R1-Distill-Qwen-32B.json", "Qwen3-8B.json"):
        assert name in names


def test_models_list_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    result = run_in(installed, tmp_path, "python", "-m", "tokenrouter", "models", "list", "--json")
    assert result.returncode == 0, result.stderr
    pairs = {p["name"]: p for p in json.loads(result.stdout)["pairs"]}
    assert set(pairs) == {"local-smollm2", "r2r-qwen-1.5b-32b", "qwen3-0.6b-8b"}
    assert sorted(pairs["local-smollm2"]["routers"]) == ["citer", "r2r"]
    assert pairs["local-smollm2"]["operating_points"]["programs"] == ["citer", "r2r", "rstitch"]
    config = run_in(installed, tmp_path, "python", "-m", "tokenrouter", "serve", "--pair", "r2r-qwen-1.5b-32b",
                    "--print-config")  # fmt: skip
    assert config.returncode == 0 and "latency_ms: 27.9" in config.stdout, config.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("optimize", "--concurrency", "4", "--json"),
        ("throughput", "--concurrency", "4", "--thresholds", "1,2", "--json"),
        ("simulate", "--concurrency", "4", "--tokens", "2000", "--json"),
    ],
)
def test_offline_commands_run_from_the_wheel(installed: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run_in(installed, tmp_path, "python", "-m", "tokenrouter", *args)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)


def test_checkout_only_folders_are_a_clear_error_when_installed(installed: Path, tmp_path: Path) -> None:
    code = "from trserve.paths import calibration_dir; calibration_dir('profiles')"
    result = run_in(installed, tmp_path, "python", "-c", code)
    assert result.returncode != 0 and "TOKENROUTER_CALIBRATION_DIR" in result.stderr
