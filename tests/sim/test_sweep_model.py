"""`tokenrouter sweep`'s analytic column (``model_tok_s``) models the simulated system and only the swept vectors.

It solved every feasible vector exactly at each N (a one-vector sweep at N = 64 ran past 10 minutes for a
simulation of a second) and without the simulator's batch cap (the flags' system runs at most 256 requests a
step: at N = 1024 the column said 46,946 tok/s beside 26,378 simulated)."""

import json

from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.throughput import ThroughputModel

FLAGS = ["--P", "0.65,0.35;1,0", "--C", "1,0;1,0", "--latency-ms", "6,27.9", "--tokens", "3000", "-j", "1"]


def test_the_model_column_solves_the_swept_vectors_of_the_simulated_system(monkeypatch, tmp_path):
    asked = []
    optimize = ThroughputModel.optimize

    def spy(self, num_requests, *args, **kwargs):
        asked.append((self.spec.max_batch, num_requests, kwargs.get("method"), kwargs.get("candidates")))
        return optimize(self, num_requests, *args, **kwargs)

    monkeypatch.setattr(ThroughputModel, "optimize", spy)
    args = ["sweep", *FLAGS, "-N", "4", "--thresholds", "1,3;2,2", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert asked == [((256, 256), 4, "auto", [(1, 3), (2, 2)])]
    rows = json.loads((tmp_path / "sweep.json").read_text())["points"]
    model = ThroughputModel([[0.65, 0.35], [1, 0]], [[1, 0], [1, 0]], [0.006, 0.0279])
    for row in rows:  # exact here (a small chain), as the model alone gives it
        assert row["model_tok_s"] == model.solve(4, row["thresholds"]).throughput_tok_s


def test_a_negative_seed_still_sweeps(tmp_path):  # the simulator takes any seed; the model column samples with 0
    result = CliRunner().invoke(app, ["sweep", *FLAGS, "-N", "2", "--seed", "-1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert all(row["model_tok_s"] is not None for row in rows)
