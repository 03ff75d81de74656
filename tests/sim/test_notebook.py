"""notebooks/thresholds.ipynb runs top to bottom (small settings) in a kernel on this very Python."""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).parents[2]
NOTEBOOK = ROOT / "notebooks" / "thresholds.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_executes_with_small_settings(monkeypatch):
    monkeypatch.setenv("TR_NB_CONCURRENCY", "4")
    monkeypatch.setenv("TR_NB_TOKENS", "5000")
    monkeypatch.setenv("TR_NB_JOBS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}).execute()
    assert nb.cells[-1].outputs[0]["text"].strip() == sys.executable  # "python3" resolved to this venv
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "model B* = " in text and "simulated B* = " in text and "bursty simulation: B* = " in text
