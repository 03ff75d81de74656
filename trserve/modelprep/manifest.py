"""Manifests of prepared model directories: the recipe a model was built from and the sha256 of every file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write(model_dir: Path, recipe: dict[str, Any]) -> None:
    """Write ``manifest.json`` covering every other file under ``model_dir``."""
    files = {
        str(path.relative_to(model_dir)): {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for path in sorted(model_dir.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }
    manifest = {"format_version": FORMAT_VERSION, "recipe": recipe, "files": files}
    (model_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read(model_dir: Path) -> dict[str, Any]:
    """The manifest of ``model_dir`` (raises ``FileNotFoundError`` when there is none)."""
    data: dict[str, Any] = json.loads((model_dir / MANIFEST_NAME).read_text())
    return data


def recipe_of(model_dir: Path) -> dict[str, Any] | None:
    """The recipe recorded in ``model_dir``'s manifest, or ``None`` without a readable manifest."""
    try:
        recipe = read(model_dir).get("recipe")
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return recipe if isinstance(recipe, dict) else None


def file_digest(model_dir: Path, name: str) -> str:
    """The sha256 the manifest records for file ``name``."""
    return str(read(model_dir)["files"][name]["sha256"])


def check(model_dir: Path, recipe: dict[str, Any], hash_files: bool = True) -> str | None:
    """Why ``model_dir`` does not hold a complete model built from ``recipe``, or ``None`` when it does.

    Without ``hash_files`` only sizes are compared (fast); with it every file's sha256 is recomputed.
    """
    try:
        manifest = read(model_dir)
    except (FileNotFoundError, json.JSONDecodeError):
        return f"no readable {MANIFEST_NAME}"
    if manifest.get("format_version") != FORMAT_VERSION:
        return f"manifest format {manifest.get('format_version')}, expected {FORMAT_VERSION}"
    if manifest.get("recipe") != recipe:
        return f"built from recipe {manifest.get('recipe')}, wanted {recipe}"
    for name, entry in manifest["files"].items():
        path = model_dir / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, manifest says {entry['bytes']}"
        if hash_files and sha256_file(path) != entry["sha256"]:
            return f"{name} sha256 differs from the manifest"
    return None
