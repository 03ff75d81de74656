"""What a pair reads besides pair.yaml: operating points that must name their pair, one broken pair that does not
hide the others, and tokenizer.json / config.json files whose bad contents are one line naming the file."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import trserve.paths
from tokenrouter.cli import app
from trcore.errors import ConfigError
from trsim.pair_identity import model_dims, tokenizer_identity, tokens_by_id
from trsim.pairs import LOCAL_PAIR, PAPER_PAIR, describe_all_pairs, load_pair

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of ``models/`` that the pair loader reads instead of the committed one."""
    shutil.copytree(ROOT / "models", tmp_path / "models")
    monkeypatch.setattr(trserve.paths, "MODELS_DIR", tmp_path / "models")
    return tmp_path / "models"


def test_operating_points_without_their_pair_are_refused(models_dir: Path) -> None:
    assert sorted(load_pair(LOCAL_PAIR).operating_points()) == ["citer", "r2r", "rstitch"]  # each names its pair
    points_file = models_dir / LOCAL_PAIR / "operating_points.json"
    points = json.loads(points_file.read_text())
    del points["r2r"]["pair"]
    points_file.write_text(json.dumps(points))
    with pytest.raises(ConfigError, match=r"operating_points: .*the r2r point names no pair"):
        load_pair(LOCAL_PAIR).operating_points()
    points_file.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"operating_points: .*must be a JSON object keyed by program"):
        load_pair(LOCAL_PAIR).operating_points()


def test_a_copied_pair_folder_does_not_inherit_the_points_of_the_pair_it_was_copied_from(models_dir: Path) -> None:
    copy = models_dir / "my-copy"
    shutil.copytree(models_dir / LOCAL_PAIR, copy)
    data = yaml.safe_load((copy / "pair.yaml").read_text())
    (copy / "pair.yaml").write_text(yaml.safe_dump({**data, "name": "my-copy"}))
    with pytest.raises(ConfigError, match="the citer point was measured on pair local-smollm2, not my-copy"):
        load_pair("my-copy").operating_points()


def test_one_broken_pair_leaves_the_others_listed(models_dir: Path) -> None:
    broken = models_dir / PAPER_PAIR / "pair.yaml"
    broken.write_text(broken.read_text().replace("small: 6.0", "small: .nan"))
    described, errors = describe_all_pairs()
    assert [p["name"] for p in described] == [LOCAL_PAIR, "qwen3-0.6b-8b"]
    assert [str(e) for e in errors] == [
        f"{broken}: latencies.0.ms.small: must be a positive finite number of ms, got nan"
    ]


def test_models_list_shows_the_good_pairs_then_exits_2_naming_the_broken_one(models_dir: Path) -> None:
    """Needs tokenrouter/commands/models.py to list through ``describe_all_pairs``."""
    broken = models_dir / PAPER_PAIR / "pair.yaml"
    broken.write_text(broken.read_text().replace("small: 6.0", "small: .inf"))
    result = CliRunner().invoke(app, ["models", "list", "--json"])
    doc = json.loads(result.stdout)  # valid JSON: no Infinity
    assert [p["name"] for p in doc["pairs"]] == [LOCAL_PAIR, "qwen3-0.6b-8b"] and len(doc["errors"]) == 1
    assert result.exit_code == 2 and result.stderr.strip() == f"error: {doc['errors'][0]}"
    assert f"{broken}: latencies.0.ms.small" in doc["errors"][0]


def tokenizer_file(tmp_path: Path, doc: object) -> Path:
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    return tmp_path


BPE = {"model": {"vocab": {"a": 0, "b": 1}}}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ([1, 2], "has no model.vocab"),
        ({"model": "bpe"}, "has no model.vocab"),
        ({"model": {"vocab": 3}}, "has no model.vocab"),
        ({"model": {"vocab": {"a": "0"}}}, "model.vocab.a must be a token id"),
        ({"model": {"vocab": {"a": -1}}}, "model.vocab.a must be a token id"),
        ({"model": {"vocab": {"a": True}}}, "model.vocab.a must be a token id"),
        ({"model": {"vocab": [["a", 0.0], 7]}}, "model.vocab.1 must be [piece, score]"),
        ({"model": {"vocab": [[]]}}, "model.vocab.0 must be [piece, score]"),
        ({**BPE, "added_tokens": {"id": 2}}, "added_tokens must be a list"),
        ({**BPE, "added_tokens": [{"content": "<eos>"}]}, "added_tokens.0.id must be a token id"),
        ({**BPE, "added_tokens": [{"id": 2}]}, "added_tokens.0 must be an object"),
        ({**BPE, "added_tokens": ["<eos>"]}, "added_tokens.0 must be an object"),
        ({**BPE, "added_tokens": [{"id": 2000000000, "content": "x"}]}, "id 2000000000 is beyond the 3 entries"),
        ({"model": {"vocab": {"a": 0, "b": 5}}}, "id 5 is beyond the 2 entries"),
    ],
)
def test_a_malformed_tokenizer_is_one_line_naming_the_file(tmp_path: Path, doc, expected) -> None:
    folder = tokenizer_file(tmp_path, doc)
    with pytest.raises(ConfigError) as err:
        tokenizer_identity(folder)
    assert str(err.value).startswith(f"{folder / 'tokenizer.json'}: ") and expected in str(err.value)


def test_tokenizer_id_command_refuses_a_bad_file_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{not json")
    result = CliRunner().invoke(app, ["models", "tokenizer-id", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {tmp_path / 'tokenizer.json'}: not valid JSON")
    tokenizer_file(tmp_path, {"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": 2000000000, "content": "x"}]})
    result = CliRunner().invoke(app, ["models", "tokenizer-id", str(tmp_path)])
    assert result.exit_code == 2 and "id 2000000000 is beyond the 2 entries" in result.stderr


def test_tokens_by_id_keeps_its_table() -> None:
    doc = {"model": {"vocab": {"a": 0, "b": 1, "<eos>": 3}}, "added_tokens": [{"id": 3, "content": "<eos>"}]}
    assert tokens_by_id(doc) == ["a", "b", None, "<eos>"]  # a gap inside the file's entries is kept as None
    assert tokens_by_id({"model": {"vocab": [["x", 0.0], ["y", -1.0]]}}) == ["x", "y"]


def test_model_dims_refuses_a_dimension_that_is_not_an_integer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": "30", "hidden_size": 576}))
    with pytest.raises(ConfigError, match=r"config\.json: num_hidden_layers must be an integer, got '30'"):
        model_dims(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "hidden_size": 576}))
    assert model_dims(tmp_path) == {"num_hidden_layers": 30, "hidden_size": 576}
