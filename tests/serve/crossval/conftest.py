"""Crossval tests never write the committed ``calibration/`` folder: a refusal that regresses would otherwise run a
whole grid into ``calibration/crossval/<hardware-tag>`` (the default ``--out``) and overwrite the committed run."""

from __future__ import annotations

from pathlib import Path

import pytest

from trserve.paths import CALIBRATION_DIR_ENV, repo_root


@pytest.fixture(autouse=True)
def calibration_outside_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``calibration/`` under ``tmp_path``: the default output lands there; the committed profiles stay readable."""
    root = tmp_path / "calibration-dir"
    root.mkdir()
    (root / "profiles").symlink_to(repo_root() / "calibration" / "profiles", target_is_directory=True)
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(root))
    return root
