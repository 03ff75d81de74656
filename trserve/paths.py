"""Every file-system location the serving code uses, in one module.

Three kinds: data that ships inside the packages (prompt sets here), found next to the code; the model pairs'
folder ``models/`` (one folder per pair, plus ``models/shapes/``), at the repository root in a checkout and
shipped inside the wheel as ``trserve/models/`` (``pyproject.toml`` maps it there); and locations outside the
package: the data root for prepared models (``$TOKENROUTER_DATA_DIR``, else ``~/.cache/tokenrouter``) and the
repository's ``calibration/`` and ``configs/`` folders, which exist only in a source checkout and are otherwise
named explicitly (``$TOKENROUTER_CALIBRATION_DIR`` or a flag), with a clear error when missing.

This module imports nothing from the project but ``trcore.errors``, so the simulator may use it too (the layering
test ranks it just above ``trcore``).
"""

from __future__ import annotations

import os
from pathlib import Path

from trcore.errors import ConfigError

__all__ = [
    "MODELS_DIR",
    "PROMPTS_DIR",
    "SHAPES_DIR",
    "calibration_dir",
    "data_root",
    "folders_without_pair_file",
    "pair_dir",
    "pair_names",
    "prepared_model_dir",
    "prepared_models_dir",
    "repo_root",
]

PACKAGE_DIR = Path(__file__).resolve().parent
#: Prompt sets shipped with the package (routing, small-model calibration).
PROMPTS_DIR = PACKAGE_DIR / "data" / "prompts"
#: ``models/``: the installed copy inside the package when there is one (a wheel), else the checkout's folder.
MODELS_DIR = PACKAGE_DIR / "models" if (PACKAGE_DIR / "models").is_dir() else PACKAGE_DIR.parent / "models"
#: Shape-only HF ``config.json``s of public models, one per model, named by the pairs that use them.
SHAPES_DIR = MODELS_DIR / "shapes"
#: Every ``models/`` entry that is not a pair.
NOT_PAIRS = ("shapes",)
DATA_DIR_ENV = "TOKENROUTER_DATA_DIR"
CALIBRATION_DIR_ENV = "TOKENROUTER_CALIBRATION_DIR"


def repo_root() -> Path | None:
    """The source checkout this package runs from, or None when installed (no ``pyproject.toml`` beside it)."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "trserve").is_dir() else None


def pair_dir(name: str) -> Path:
    """``models/<name>``: the folder of model pair ``name`` (it may not exist: the pair loader says so)."""
    return MODELS_DIR / name


def pair_names() -> list[str]:
    """Names of the pairs under ``models/``: every folder holding a ``pair.yaml``."""
    return sorted(p.parent.name for p in MODELS_DIR.glob("*/pair.yaml") if p.parent.name not in NOT_PAIRS)


def folders_without_pair_file() -> list[str]:
    """Folders under ``models/`` that look like pairs but hold no ``pair.yaml`` (a ``pair.yml``, a typo)."""
    folders = [p for p in MODELS_DIR.glob("*/") if p.name not in NOT_PAIRS and not p.name.startswith((".", "_"))]
    return sorted(p.name for p in folders if not (p / "pair.yaml").is_file())


def data_root() -> Path:
    """The data root: ``$TOKENROUTER_DATA_DIR``, else ``$XDG_CACHE_HOME/tokenrouter`` or ``~/.cache/tokenrouter``."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "tokenrouter"


def prepared_models_dir(root: Path | None = None) -> Path:
    """Where ``tokenrouter models prepare`` puts the local pair's checkpoints: ``<data root>/models``."""
    return (root or data_root()) / "models"


def prepared_model_dir(name: str, root: Path | None = None) -> Path:
    """Directory of prepared model ``name`` under the data root (it may not exist yet)."""
    return prepared_models_dir(root) / name


def calibration_dir(*parts: str) -> Path:
    """``calibration/<parts>``: ``$TOKENROUTER_CALIBRATION_DIR``, else the checkout's ``calibration/`` folder.

    Outside a checkout without the variable this is an error naming both ways to supply it.
    """
    env = os.environ.get(CALIBRATION_DIR_ENV)
    root = repo_root()
    if env:
        base = Path(env).expanduser()
    elif root is not None:
        base = root / "calibration"
    else:
        raise ConfigError(
            "calibration", f"no calibration folder: not in a source checkout; set ${CALIBRATION_DIR_ENV} or pass it"
        )
    return base.joinpath(*parts)
