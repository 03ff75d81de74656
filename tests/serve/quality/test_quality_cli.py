"""`tokenrouter quality` refuses bad input with one line and exit status 2, before a scorer loads or an engine
starts (the sweep and the build-set run are replaced by a guard that fails the test if they are reached), and
picks operating points only for the pair the results were measured on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "quality" / "quality.json"
EMULATED = ROOT / "configs" / "emulated-r2r-a100.yaml"
ROW = {"name": "r2r", "program": "r2r", "params": {"threshold": 0.3}, "large_share": 0.4, "accuracy": 0.9,
       "relative_accuracy": 0.95, "probe_answers": {"What is the capital of France?": "Paris."}}  # fmt: skip


@pytest.fixture(autouse=True)
def no_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reaching the sweep or the build-set run means the refusal came too late."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the models would have started")

    monkeypatch.setattr("trserve.quality.run.measure_quality", started)
    monkeypatch.setattr("trserve.quality.run.build_set", started)


def _refused(args: list[str], *expected: str) -> str:
    result = CliRunner().invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in result.output, result.output
    assert all(e in lines[-1] for e in expected), result.output
    return lines[-1]


def _doc(tmp_path: Path, pair: str | None = "local-smollm2", rows: object = None) -> Path:
    doc = {"command": "tokenrouter quality", "rows": [ROW] if rows is None else rows}
    if pair is not None:
        doc["pair"] = pair
    path = tmp_path / "quality.json"
    path.write_text(json.dumps(doc))
    return path


def test_results_of_one_pair_are_refused_for_another(tmp_path: Path) -> None:
    stray = ROOT / "models" / "r2r-qwen-1.5b-32b" / "operating_points.json"
    args = ["quality", "--target-accuracy", "0.9", "--pair", "r2r-qwen-1.5b-32b", "--save-operating-point"]
    _refused([*args, "--from", str(RESULTS)], "--pair", "local-smollm2", "not r2r-qwen-1.5b-32b")
    _refused([*args, "--from", str(_doc(tmp_path, pair=None))], "--save-operating-point", "records no model pair")
    assert not stray.exists()


def test_the_committed_results_name_their_pair() -> None:
    assert json.loads(RESULTS.read_text())["pair"] == "local-smollm2"


def test_saved_point_names_the_results_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = tmp_path / "points.json"
    monkeypatch.setattr("trserve.quality.checks.operating_points_file", lambda pair, option: saved)
    args = ["quality", "--from", str(_doc(tmp_path)), "--target-accuracy", "0.9", "--save-operating-point"]
    result = CliRunner().invoke(app, [*args, "--program", "r2r", "--probe-contains", "Paris"])
    assert result.exit_code == 0, result.output
    assert json.loads(saved.read_text())["r2r"]["pair"] == "local-smollm2"


@pytest.mark.parametrize("rows", [[], [{"name": "r2r"}], [["r2r"]], [{**ROW, "accuracy": "high"}]])
def test_malformed_results_are_refused(tmp_path: Path, rows: object) -> None:
    path = _doc(tmp_path, rows=rows)
    _refused(["quality", "--from", str(path), "--target-accuracy", "0.9"], "--from", str(path))


@pytest.mark.parametrize("text", ["[]", "{}", '{"command": "x", "rows": [{}]}', "not json"])
def test_results_that_are_no_results_document_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "quality.json"
    path.write_text(text)
    _refused(["quality", "--from", str(path), "--target-accuracy", "0.9"], "--from", str(path))


def test_from_refuses_the_options_of_a_sweep(tmp_path: Path) -> None:
    args = ["quality", "--from", str(_doc(tmp_path)), "--target-accuracy", "0.9", "--config", "/nonexistent.yaml",
            "--eval-set", "/nonexistent", "--points", "bogus:x=1", "--out", str(tmp_path / "o"), "--max-tokens", "5",
            "--concurrency", "3", "--questions", "2"]  # fmt: skip
    line = _refused(args, "--from")
    for flag in ("--config", "--eval-set", "--points", "--out", "--max-tokens", "--concurrency", "--questions"):
        assert flag in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--program", ""], "--program"),
        (["--program", ","], "--program"),
        (["--points", "rstitch:tau=nan"], "rstitch.tau"),
        (["--points", "rstitch:tau=-1"], "rstitch.tau"),
        (["--points", "rstitch:nope=1"], "nope"),
        (["--points", "r2r:threshold=2"], "r2r.threshold"),
        (["--probe-contains", "Paris"], "--probe-contains"),
        (["--questions", "100000"], "--questions"),
    ],
)
def test_bad_sweep_options_are_refused_up_front(args: list[str], expected: str) -> None:
    _refused(["quality", *args], expected)


def test_pair_is_resolved_as_serve_does() -> None:
    from tokenrouter.commands.quality import _serve_config

    with pytest.raises(ConfigError, match=r"--config: pair r2r-qwen-1\.5b-32b has no checkpoints"):
        _serve_config(EMULATED, None)  # the config's pair, not a default local-smollm2 (which lacks P)
    assert _serve_config(None, None).pair == "local-smollm2"
    _refused(["quality", "--config", str(EMULATED), "--pair", "local-smollm2"], "--pair", "serves pair r2r")


@pytest.mark.parametrize("command", [["quality"], ["quality", "build-set"]])
def test_a_pair_without_checkpoints_is_refused(command: list[str]) -> None:
    _refused([*command, "--pair", "r2r-qwen-1.5b-32b", *(["--program", "rstitch"] * (len(command) == 1))],
             "--pair", "no checkpoints")  # fmt: skip
    _refused([*command, "--config", str(EMULATED)], "--config", "no checkpoints")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"id": "a", "prompt": "Capital of Peru?"}', "missing answers"),
        ('["a", "Capital of Peru?"]', "expected an object"),
        ('{"id": "a", "prompt": "Capital of Peru?", "answers": "lima"}', "answers must be a non-empty list"),
        ("{oops", "invalid JSON"),
    ],
)
def test_bad_question_files_are_refused_with_their_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text('{"id": "q", "prompt": "Capital of Chile?", "answers": ["santiago"]}\n' + line + "\n")
    _refused(["quality", "--eval-set", str(path)], "--eval-set", f"{path}:2", problem)
    _refused(["quality", "build-set", "--candidates", str(path)], "--candidates", f"{path}:2", problem)
