"""notebooks/thresholds.ipynb is committed executed (scripts/run_notebook.py), and re-executing it (small settings,
in a kernel on this very Python) succeeds with the same cells and the same kinds of output in each."""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).parents[2]
NOTEBOOK = ROOT / "notebooks" / "thresholds.ipynb"


def output_kinds(cell: nbformat.NotebookNode) -> set[tuple[str, ...]]:
    """What a code cell shows, by kind: printed streams by name, displays and results by their MIME types."""
    kinds = set()
    for out in cell.outputs:
        if out.output_type == "stream":
            kinds.add(("stream", out.name))
        elif out.output_type == "error":
            kinds.add(("error", out.ename))
        else:
            kinds.add((out.output_type, *sorted(out.get("data", {}))))
    return kinds


def test_notebook_is_committed_with_its_outputs_and_plots():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))  # run top to bottom, once
    assert not any(k[:1] == ("error",) for c in code for k in output_kinds(c))
    plots = [c for c in code if any("image/png" in k for k in output_kinds(c))]
    assert len(plots) >= 4  # the sweep, bursty routing, the plan, thresholds over changing traffic
    assert 'PAIR = os.environ.get("TR_NB_PAIR", "r2r-qwen-1.5b-32b")' in code[0].source  # the pair, by name


def test_reexecuting_the_notebook_yields_the_same_cells_and_output_kinds(monkeypatch):
    monkeypatch.setenv("TR_NB_CONCURRENCY", "4")
    monkeypatch.setenv("TR_NB_TOKENS", "5000")
    monkeypatch.setenv("TR_NB_JOBS", "1")
    monkeypatch.setenv("TR_NB_PHASE_S", "10")
    committed = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}).execute()
    assert nb.cells[-1].outputs[0]["text"].strip() == sys.executable  # "python3" resolved to this venv
    fresh = nb.cells[:-1]
    assert [(c.cell_type, c.source) for c in fresh] == [(c.cell_type, c.source) for c in committed.cells]
    for old, new in zip(committed.cells, fresh, strict=True):
        if old.cell_type == "code":
            assert output_kinds(new) == output_kinds(old), old.source[:60]
    text = "".join(o.get("text", "") for c in fresh if c.cell_type == "code" for o in c.outputs)
    assert "model B* = " in text and "simulated B* = " in text and "bursty simulation: B* = " in text
    assert "oracle's B* per phase: " in text and "adaptive " in text and "of the oracle's: " in text


def test_the_scenario_cell_reads_relative_paths_and_sets_a_diurnal_days_phases(monkeypatch):
    # The cell's config, for scenarios a user may point it at: adaptive-cpu names its profiles relative to its own
    # folder (FileNotFoundError from the repository root), adaptive-diurnal's phases come from its day (the knob
    # set only a phases: list's, so the day kept its 20 s phases).
    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if 'SCENARIO = "' in c.source)
    head, _, _ = cell.source.partition("runs = {")  # the config and the oracle, not the runs
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TR_NB_PHASE_S", "10")
    for name, num_phases in (("adaptive-cpu", 2), ("adaptive-diurnal", 12)):
        scope: dict = {}
        code = head.replace("trsim/scenarios/adaptive-phases.yaml", f"trsim/scenarios/{name}.yaml")
        exec("import os\nfrom dataclasses import replace\n" + code, scope)
        assert [p.duration_s for p in scope["plain"].phases] == [10.0] * num_phases, name
