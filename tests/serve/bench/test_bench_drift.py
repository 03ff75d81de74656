"""The bench's drift probe without engines: which placements it probes, what each mode does to the predictions
(synthetic profiles with hand-computed latencies), and bad flags. The probe on real engines runs inside the CI
bench (tests/serve/bench/test_bench.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.serve.server.test_drift import by_hand, write_profiles
from tokenrouter.commands.bench import bench
from trserve.bench.cells import BenchPlan, Cell
from trserve.bench.client import Workload
from trserve.bench.drift import BenchDrift, placements_of, probe_bench
from trserve.bench.predict import BENCH_CONTEXT
from trserve.bench.runner import BenchRunner
from trserve.hardware import hardware_tag
from trserve.server.defaults import DEFAULT_CONFIG

TAG = hardware_tag()
ALL = f"{TAG}-allcores"


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Synthetic profiles of both placements, found through $TOKENROUTER_CALIBRATION_DIR."""
    write_profiles(tmp_path / "profiles" / TAG)
    write_profiles(tmp_path / "profiles" / ALL)
    monkeypatch.setenv("TOKENROUTER_CALIBRATION_DIR", str(tmp_path))
    return tmp_path


def probed(action: str, factors: list[float]) -> dict:
    return {"models": ["small", "large"], "ratios": [1.25, 0.8], "action": action, "factors": factors}


def runner_with(drift: BenchDrift) -> BenchRunner:
    plan = BenchPlan(("tokenrouter-b1", "llm-only"), ("rstitch",), (1, 2), 1, Workload(), dict(DEFAULT_CONFIG),
                     drift=drift)  # fmt: skip
    return BenchRunner(plan, None)


def test_scale_multiplies_the_profile_tables_and_names_the_factors(profiles: Path) -> None:
    scaled = BenchDrift("scale", 0.05, {TAG: probed("scaled", [1.25, 0.8])})
    tables, source = runner_with(scaled)._tables([], ["small", "large"], profiles=True)
    expected = [[by_hand(k, b, BENCH_CONTEXT, f) for b in (1, 2)] for k, f in ((0, 1.25), (1, 0.8))]
    assert tables == [pytest.approx(t) for t in expected]
    assert source == f"calibration profile ({TAG}), x drift 1.25/0.80"


def test_report_leaves_the_predictions_as_the_profiles_give_them(profiles: Path) -> None:
    reported = BenchDrift("report", 0.05, {TAG: probed("reported only", [1.0, 1.0])})
    tables, source = runner_with(reported)._tables([], ["small", "large"], profiles=True)
    assert tables == [pytest.approx([by_hand(k, b, BENCH_CONTEXT) for b in (1, 2)]) for k in (0, 1)]
    assert source == f"calibration profile ({TAG})"


def test_llm_only_is_predicted_from_the_scaled_all_cores_profile(profiles: Path) -> None:
    """One model at B = 1 keeps all N requests in every step: N tokens per step of L(N), i.e. N / L(N) tok/s."""
    for factor in (1.0, 1.5):
        drift = BenchDrift("scale", 0.05, {ALL: {"models": ["large"], "action": "scaled", "factors": [factor]}})
        cell = Cell("llm-only", "none", 2)
        runner_with(drift)._predict(cell)
        assert cell.predicted_model == pytest.approx(2 / by_hand(1, 2, BENCH_CONTEXT, factor), rel=0.03)
        assert cell.latency_source.startswith(f"calibration profile ({ALL})")
        assert ("x drift 1.50" in cell.latency_source) == (factor != 1.0)


def test_the_placements_follow_the_systems_and_emulated_needs_no_probe(profiles: Path) -> None:
    assert placements_of(DEFAULT_CONFIG, ["tokenrouter", "llm-only"]) == {TAG: ["small", "large"], ALL: ["large"]}
    assert placements_of(DEFAULT_CONFIG, ["lockstep"]) == {ALL: ["small", "large"]}
    assert placements_of(DEFAULT_CONFIG, ["vllm-server"]) == {}  # not predicted, so not probed
    skipped = probe_bench(DEFAULT_CONFIG, ["per-token", "llm-only"], "skip", 0.05)  # no engine starts
    assert {t: e["action"] for t, e in skipped.placements.items()} == {TAG: "not probed (--drift skip)",
                                                                        ALL: "not probed (--drift skip)"}  # fmt: skip
    assert skipped.factor(TAG, "small") == 1.0
    emulated = probe_bench({**DEFAULT_CONFIG, "backend": "emulated"}, ["tokenrouter"], "stop", 0.05)
    assert emulated.to_dict()["action"].startswith("not needed (emulated") and emulated.placements == {}
    assert "not needed (emulated" in emulated.line()
    renamed = {**DEFAULT_CONFIG, "models": [{**m, "name": f"other-{m['name']}"} for m in DEFAULT_CONFIG["models"]]}
    missing = probe_bench(renamed, ["tokenrouter"], "scale", 0.05)  # no profile of these models: nothing to probe
    assert missing.placements[TAG]["action"] == "not probed: no profile of this placement"


def test_the_all_cores_probe_runs_each_model_alone_on_every_core() -> None:
    from trserve.bench.drift import probe_configs
    from trserve.runtime.placement import available_cpus, place_models

    pair = probe_configs(DEFAULT_CONFIG, TAG, ["small", "large"])
    assert [[m.name for m in c.models] for c in pair] == [["small", "large"]]
    alone = probe_configs(DEFAULT_CONFIG, ALL, ["small", "large"])
    assert [[m.name for m in c.models] for c in alone] == [["small"], ["large"]]
    for cfg in alone:
        assert place_models(list(cfg.models))[0].cpus == tuple(available_cpus())


def test_the_header_line_gives_each_ratio_and_the_action() -> None:
    skipped = {"models": ["large"], "action": "not probed (--drift skip)"}
    drift = BenchDrift("scale", 0.05, {TAG: probed("scaled", [1.25, 0.8]), ALL: skipped})
    assert drift.line() == (f"Drift probe (--drift scale, tolerance 5%): {TAG}: small 1.25x, large 0.80x -> scaled; "
                            f"{ALL}: not probed (--drift skip).")  # fmt: skip
    assert drift.factors(TAG, ["large", "small"]) == [0.8, 1.25] and drift.factor(ALL, "large") == 1.0


@pytest.mark.parametrize(("args", "message"), [(["--drift", "maybe"], "--drift: unknown mode 'maybe'"),
                                               (["--drift-tolerance", "0"], "--drift-tolerance")])  # fmt: skip
def test_bad_drift_flags_are_one_line_exit_2(args: list[str], message: str) -> None:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.filterwarnings("ignore:No artists with labels")  # the figure of a bench with no runs
def test_the_outputs_record_the_probe_in_the_json_and_the_markdown_header(tmp_path: Path) -> None:
    import json

    from trserve.bench.outputs import write_outputs

    runner = runner_with(BenchDrift("scale", 0.05, {TAG: probed("scaled", [1.25, 0.8])}))
    write_outputs(tmp_path, runner.plan, runner, "tokenrouter bench", {}, 0.0)
    drift = json.loads((tmp_path / "bench.json").read_text())["drift"]
    assert drift == {"mode": "scale", "tolerance": 0.05, "placements": {TAG: probed("scaled", [1.25, 0.8])}}
    lines = (tmp_path / "bench.md").read_text().splitlines()
    assert lines[2] == f"Drift probe (--drift scale, tolerance 5%): {TAG}: small 1.25x, large 0.80x -> scaled."
