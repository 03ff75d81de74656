"""The README stays a front door: at most 200 lines, and every repository path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 200
#: Made by `bash scripts/setup.sh`, not committed.
CREATED_BY_SETUP = (".venv",)
PATH_SUFFIXES = (".md", ".py", ".json", ".jsonl", ".yaml", ".yml", ".ipynb", ".sh", ".png", ".npz", ".toml")


def named_paths(text: str) -> set[str]:
    """Repository paths named in markdown: link targets, and backticked words that look like paths."""
    links = {target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target}
    quoted = {
        word
        for word in re.findall(r"`([^`\s]+)`", text)
        if "://" not in word and not word.startswith("-") and ("/" in word or word.endswith(PATH_SUFFIXES))
    }
    return {path.split("#")[0] for path in links | quoted} - {""}


def exists(path: str) -> bool:
    if path.startswith(CREATED_BY_SETUP):
        return True
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def test_named_paths_finds_links_and_backticked_paths():
    text = "See [a](docs/a.md#x), `trcore/`, `b.py`, `trcore.Subserver`, `--out DIR`, [w](https://x.org/y)."
    assert named_paths(text) == {"docs/a.md", "trcore/", "b.py"}


def test_readme_is_short():
    num_lines = len(README.read_text().splitlines())
    assert num_lines <= MAX_LINES, f"README.md has {num_lines} lines; move reference material to docs/"


def test_readme_names_only_files_in_the_repository():
    missing = sorted(path for path in named_paths(README.read_text()) if not exists(path))
    assert not missing, f"README.md names paths that do not exist: {missing}"
