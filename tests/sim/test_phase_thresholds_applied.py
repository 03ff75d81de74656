"""simulate's JSON says which vector ran, not only the one set: a threshold above what a phase's concurrency allows
runs capped (B = (1, 12) at N = 8 runs as (1, 8)); ``thresholds`` keeps the vector as set, ``applied`` as run."""

import json

import yaml
from typer.testing import CliRunner

from tokenrouter.cli import app

runner = CliRunner()
MODELS = [
    {"name": "slm", "latency": {"model": "table", "batch_sizes": [1, 64], "ms": [6.0, 18.0]}},
    {"name": "llm", "latency": {"model": "table", "batch_sizes": [1, 64], "ms": [27.9, 62.0]}, "threshold": 12},
]
SCENARIO = {
    "name": "capped",
    "models": MODELS,
    "router": {"program": "markov", "P": [[0.9, 0.1], [1.0, 0.0]], "C": [[1.0, 0.0], [1.0, 0.0]]},
    "workload": {"prompt_tokens": 16, "output_tokens": 32, "concurrency": 16},
}


def _simulate(tmp_path, scenario, *args):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    result = runner.invoke(app, ["simulate", "--scenario", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_each_phase_lists_the_vector_as_set_and_as_run(tmp_path):
    phases = [{"duration_s": 2, "concurrency": 16}, {"duration_s": 2, "concurrency": 8}]
    out = json.loads(_simulate(tmp_path, {**SCENARIO, "phases": phases}, "--json"))
    assert [p["thresholds"] for p in out["phases"]] == [[1, 12], [1, 12]]
    assert [p["applied"] for p in out["phases"]] == [[1, 12], [1, 8]]
    assert "B=[1, 12] (runs as [1, 8]), N=8" in _simulate(tmp_path, {**SCENARIO, "phases": phases})


def test_a_run_without_phases_says_it_too(tmp_path):
    out = json.loads(_simulate(tmp_path, {**SCENARIO, "workload": {**SCENARIO["workload"], "concurrency": 8}},
                               "--json", "--tokens", "2000"))  # fmt: skip
    assert out["thresholds"] == [1, 12] and out["applied"] == [1, 8] and out["concurrency"] == 8
