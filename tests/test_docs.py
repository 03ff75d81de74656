"""The README stays a front door: at most 200 lines, and every repository path it names exists. Across README.md
and docs/*.md, every link between documents resolves (file and heading), and every option a documented
`tokenrouter ...` command line gives is an option of that command."""

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


DOCS = (README, *sorted((ROOT / "docs").glob("*.md")))


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    titles = re.findall(r"^#+\s+(.+?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def test_heading_anchors_follow_githubs_rule():
    assert heading_anchors("# Thresholds `auto`\n## Wire and security (`tcp`)\n") == {
        "thresholds-auto",
        "wire-and-security-tcp",
    }


def test_links_between_documents_resolve_to_a_file_and_heading():
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            path, _, anchor = target.partition("#")
            if "://" in target or not (path.endswith(".md") or not path):
                continue
            linked = (doc.parent / path) if path else doc
            if not linked.exists() or (anchor and anchor not in heading_anchors(linked.read_text())):
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, f"links to no file or heading: {broken}"


def documented_invocations(text: str) -> list[tuple[str, list[str]]]:
    """`tokenrouter WORDS --options` in markdown (continued lines joined): the words, then every option given."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for words, rest in re.findall(r"tokenrouter((?: [a-z][a-z-]*)+)([^`#|\n]*)", joined):
        found.append((words.strip(), re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest)))
    return found


def test_documented_invocations_are_read_with_their_options():
    text = "run `tokenrouter models prepare --force` or\n    tokenrouter crossval --rate 10 \\\n  -n 2  # --no\n"
    assert documented_invocations(text) == [("models prepare", ["--force"]), ("crossval", ["--rate", "-n"])]


def test_documented_command_lines_use_options_the_command_has():
    from typer.main import get_command

    from tokenrouter.cli import app

    root = get_command(app)
    unknown = []
    for doc in DOCS:
        for words, options in documented_invocations(doc.read_text()):
            command = root
            for word in words.split():  # subcommands as deep as the words go; the rest are arguments
                command = getattr(command, "commands", {}).get(word, command)
            if command is root:
                continue  # prose ("tokenrouter's"), not a command line
            have = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
            unknown += [f"{doc.relative_to(ROOT)}: tokenrouter {words} {opt}" for opt in options if opt not in have]
    assert not unknown, f"documented options the command does not take: {unknown}"
