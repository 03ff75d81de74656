"""`tokenrouter calibrate`: a tiny grid on the real small model in its placed process, and bad input.

The end-to-end test starts one vLLM engine in a calibration process of its own (that is the point: it is placed
like the server's subserver), so it shares only the ``prepared_pair`` fixture, not the in-process engines.
"""

from __future__ import annotations

import os

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tokenrouter.commands.calibrate import calibrate
from trsim.profile import load_profile

app = typer.Typer()
app.command()(calibrate)
runner = CliRunner()


def write_config(tmp_path, large: str, small: str) -> str:
    model = {"max_model_len": 512, "kv_cache_gib": 0.25, "max_num_seqs": 16}
    data = {"models": [{"name": "large", "path": large, **model}, {"name": "small", "path": small, **model}],
            "server": {"max_active_requests": 16}}  # fmt: skip
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--models", "medium"], "--models"), (["--models", ","], "--models: names no model"),
     (["--batch-sizes", "0,2"], "--batch-sizes"), (["--batch-sizes", "two"], "--batch-sizes"),
     (["--batch-sizes", "1,32"], "--batch-sizes"), (["--max-cell-tokens", "0"], "--max-cell-tokens"),
     (["--contexts", "64,512"], "--contexts"), (["--repeats", "0"], "--repeats"), (["--extend", "600"], "--extend")],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_before_any_engine_starts(tmp_path, args, field):
    config = write_config(tmp_path, str(tmp_path / "no-large"), str(tmp_path / "no-small"))
    result = runner.invoke(app, ["--config", config, "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), result.stderr
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_a_model_that_is_not_prepared_is_a_one_line_error(tmp_path):
    config = write_config(tmp_path, str(tmp_path / "no-large"), str(tmp_path / "no-small"))
    result = runner.invoke(app, ["--config", config, "--models", "small", "--quick"])
    assert result.exit_code == 2 and result.stderr.startswith("error: models.1.path"), result.stderr


#: Step latency of each closed-form fit, written out from its definition (not through trsim's model classes).
HAND_FORMULAS = {
    "constant": lambda k, s: k["latency_s"],
    "linear": lambda k, s: k["a"] + k["b"] * s.batch_size + k["c"] * s.context_tokens,
    "quadratic": lambda k, s: (k["a"] + k["b"] * s.batch_size + k["c"] * s.context_tokens + k["d"] * s.extend_tokens
                               + k["e"] * s.batch_size**2),
}  # fmt: skip


@pytest.mark.serve
def test_tiny_grid_on_the_small_model_writes_a_profile_that_predicts_its_samples(tmp_path, prepared_pair):
    from trserve.config import load_config
    from trserve.runtime.placement import place_models

    config = write_config(tmp_path, *map(str, prepared_pair))
    out = tmp_path / "profiles"
    args = ["--config", config, "--models", "small", "--quick", "--batch-sizes", "1,2", "--contexts", "16,64",
            "--extend", "8,64", "--repeats", "2", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    path = out / f"cpu-{os.cpu_count()}core" / "small.json"
    assert f"-> {path}" in result.stdout and not (path.parent / "large.json").exists()
    profile = load_profile(path)
    cal = profile.calibration

    expected_cpus = list(place_models(list(load_config(config).models))[1].cpus)
    assert profile.machine.model_extra["cpus"] == expected_cpus and profile.machine.num_threads == len(expected_cpus)
    steps = cal["steps"]
    assert steps["run"] == steps["planned"] + steps["retried_steps"] and cal["engine"]["max_num_seqs"] == 16
    assert "--models small" in cal["command"]

    decode = [s for s in profile.samples if s.extend_tokens == 0]
    assert len(decode) == 2 * 2 * 2  # batch sizes x contexts x repeats
    assert {s.batch_size for s in decode} == {1, 2}
    assert all(b * 17 <= s.context_tokens <= b * 64 + 40 for s in decode for b in [s.batch_size])
    # Each closed-form fit's MAPE recomputed by hand from its coefficients and the raw samples it was fitted to.
    every = profile.sample_list()
    assert {0, 8, 64} <= {s.extend_tokens for s in every}
    checked = set()
    for record in [profile.fit, *profile.other_fits]:
        if record.model not in HAND_FORMULAS:
            continue
        own = every if cal["fits"][record.model]["samples"] == "all" else [s for s in every if not s.extend_tokens]
        formula = HAND_FORMULAS[record.model]
        by_hand = sum(abs(formula(record.coefficients, s) - s.latency_s) / s.latency_s for s in own) / len(own)
        assert record.mape == pytest.approx(by_hand, rel=1e-6), record.model
        assert cal["fits"][record.model]["num_samples"] == len(own)
        checked.add(record.model)
    assert "constant" in checked and len(checked) >= 2  # --quick fits constant, table and linear

    (handoff,) = cal["handoff"]
    assert handoff["readmit_return"]["computed_tokens"] == 16 and handoff["session_return"]["computed_tokens"] == 5
    assert handoff["return_ratio_readmit_over_session"] > 0
