"""Every file-system location the serving code uses, in one module.

Two kinds: data that ships inside the packages (prompt sets here, shape configs in ``trsim``, trained routers in
``trcore``), found next to the code so a wheel install works; and locations outside the package: the data root
for prepared models (``$TOKENROUTER_DATA_DIR``, else ``~/.cache/tokenrouter``) and the repository's
``calibration/`` and ``configs/`` folders, which exist only in a source checkout and are otherwise named
explicitly (``$TOKENROUTER_CALIBRATION_DIR`` or a flag), with a clear error when missing.
"""

from __future__ import annotations

import os
from pathlib import Path

from trcore.errors import ConfigError
from trcore.programs.detour import ROUTERS_DIR
from trsim.shapes import SHAPES_DIR

__all__ = [
    "PROMPTS_DIR",
    "ROUTERS_DIR",
    "SHAPES_DIR",
    "calibration_dir",
    "data_root",
    "prepared_model_dir",
    "repo_root",
]

PACKAGE_DIR = Path(__file__).resolve().parent
#: Prompt sets shipped with the package (routing, small-model calibration).
PROMPTS_DIR = PACKAGE_DIR / "data" / "prompts"
DATA_DIR_ENV = "TOKENROUTER_DATA_DIR"
CALIBRATION_DIR_ENV = "TOKENROUTER_CALIBRATION_DIR"


def repo_root() -> Path | None:
    """The source checkout this package runs from, or None when installed (no ``pyproject.toml`` beside it)."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "trserve").is_dir() else None


def data_root() -> Path:
    """The data root: ``$TOKENROUTER_DATA_DIR``, else ``$XDG_CACHE_HOME/tokenrouter`` or ``~/.cache/tokenrouter``."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "tokenrouter"


def prepared_model_dir(name: str, root: Path | None = None) -> Path:
    """Directory of prepared model ``name`` under the data root (it may not exist yet)."""
    return (root or data_root()) / "models" / name


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
