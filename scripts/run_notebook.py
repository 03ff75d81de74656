"""Execute notebooks/thresholds.ipynb in place with its default settings, so the committed copy shows its results
(printed figures and plots) where a reader looks.

    .venv/bin/python scripts/run_notebook.py [--pair r2r-qwen-1.5b-32b] [--timeout 900]

The kernel is ``python3`` run from the repository root (the suite checks it resolves to this interpreter); the
pair goes to the notebook's first cell through ``TR_NB_PAIR``. tests/sim/test_notebook.py re-executes the notebook
with small settings and checks the same cells and kinds of output come back.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "thresholds.ipynb"


def execute(path: Path, timeout: int) -> nbformat.NotebookNode:
    """The notebook at ``path``, executed top to bottom with the working directory at the repository root."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="Model pair for the first cell (default: the notebook's own).")
    parser.add_argument("--timeout", type=int, default=900, help="Seconds per cell at most.")
    args = parser.parse_args()
    if args.pair:
        os.environ["TR_NB_PAIR"] = args.pair
    started = time.perf_counter()
    nb = execute(NOTEBOOK, args.timeout)
    nbformat.write(nb, NOTEBOOK)
    print(f"executed {NOTEBOOK.relative_to(ROOT)} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
