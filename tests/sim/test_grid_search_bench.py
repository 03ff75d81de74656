"""benchmarks/grid_search.py end to end on the one-phase adaptive-learn scenario (N = 8, 36 feasible vectors): the
JSON it writes holds the full and the grid search side by side, with the vectors each solved."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_grid_search_bench_writes_both_searches(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("grid_search", ROOT / "benchmarks" / "grid_search.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "grid.json"
    assert bench.main(["--scenario", "trsim/scenarios/adaptive-learn.yaml", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (case,) = doc["cases"]
    assert case["scenario"] == "adaptive-learn" and case["concurrency"] == 8 and case["feasible"] == 36
    assert case["full"]["solved"] == 36 and case["grid"]["solved"] < 36 + 36
    assert 0.97 < case["grid_over_full_tok_s"] <= 1.03
    assert doc["summary"]["past_max_candidates"]["cases"] == 0
