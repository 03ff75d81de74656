"""A scenario file's values are strict, as a serve config's and a pair.yaml's: a value of another type is one line
naming the field (exit 2), not a conversion (``threshold: true`` ran B = 1, ``concurrency: "16"`` ran 16)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

BASE = {
    "threshold": "4",
    "concurrency": "16",
    "tokens": "2000",
    "seed": "0",
}
TEMPLATE = """models:
  - latency: {{ms: 6.0}}
    threshold: {threshold}
  - latency: {{ms: 27.9}}
router: {{program: markov, P: [[0.65, 0.35], [1.0, 0.0]], C: [[1.0, 0.0], [1.0, 0.0]]}}
workload: {{preset: short-reasoning, concurrency: {concurrency}}}
run: {{tokens: {tokens}}}
seed: {seed}
"""


def simulate(tmp_path, **values: str):
    path = tmp_path / "s.yaml"
    path.write_text(TEMPLATE.format(**{**BASE, **values}))
    return CliRunner().invoke(app, ["simulate", "--scenario", str(path), "--json"])


def test_the_base_scenario_runs(tmp_path):
    assert simulate(tmp_path).exit_code == 0


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"threshold": "true"}, "models.0.threshold"),
        ({"threshold": "4.0"}, "models.0.threshold"),
        ({"concurrency": "'16'"}, "workload.concurrency"),
        ({"tokens": "2000.0"}, "run.tokens"),
        ({"seed": "yes"}, "seed"),
    ],
)
def test_a_value_of_another_type_is_refused_not_converted(tmp_path, values, field):
    result = simulate(tmp_path, **values)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {field}: Input should be a valid integer", result.stderr


def test_a_scenario_that_is_not_utf8_text_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xff\xfemodels: []\n")
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: scenario: {path}: not UTF-8 text (invalid start byte at byte 0)"


@pytest.mark.parametrize(
    ("length", "words"),
    [
        ('"x"', "workload.prompt_tokens: Input should be a valid integer or a valid dictionary"),
        ("{dist: uniform, low: '3'}", "workload.prompt_tokens.low: Input should be a valid integer"),
    ],
)
def test_a_length_no_member_of_its_union_takes_names_the_field_not_pydantics_tags(tmp_path, length, words):
    """A length is a number or a distribution: the error named 'prompt_tokens.constrained-int' before."""
    path = tmp_path / "s.yaml"
    text = TEMPLATE.format(**BASE).replace("concurrency: 16}", f"concurrency: 16, prompt_tokens: {length}}}")
    path.write_text(text)
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {words}"), result.stderr


def test_a_key_given_twice_is_refused_not_the_last_one_kept(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(TEMPLATE.format(**BASE) + "run: {tokens: 3000}\n")
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(path)])
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip()
        == f"error: scenario: {path}: invalid YAML at line 9: key 'run' given twice in one mapping"
    )
