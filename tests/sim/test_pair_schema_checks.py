"""pair.yaml is checked when it loads: numbers (latencies, batch sizes, P and C), duplicates, loose types and files
are one line naming the file and the field, not a later error blamed on an option the user never typed."""

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.errors import ConfigError
from trsim.pairs import LOCAL_PAIR, PAPER_PAIR, read_pair_file

ROOT = Path(__file__).resolve().parents[2]
NAN, INF = float("nan"), float("inf")


def pair_copy(tmp_path: Path, name: str) -> Path:
    """A copy of committed pair ``name`` (its folder, routers and points included) under ``tmp_path``."""
    folder = tmp_path / name
    shutil.copytree(ROOT / "models" / name, folder)
    return folder / "pair.yaml"


def edit_pair(path: Path, edit: Callable[[dict], object]) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def load_error(path: Path) -> str:
    """The one line that loading ``path`` fails with, without the file's name in front."""
    with pytest.raises(ConfigError) as err:
        read_pair_file(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and "Value error" not in line
    return line.removeprefix(f"{path}: ")


def local_latency(**changes: object) -> Callable[[dict], object]:
    return lambda d: d["latencies"][0].update(changes)


def paper_routing(**changes: object) -> Callable[[dict], object]:
    return lambda d: d["routing"][0].update(changes)


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(small=NAN), "latencies.0.ms.small: must be a positive"),
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(large=INF), "latencies.0.ms.large: must be a positive"),
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(small=-6.0), "latencies.0.ms.small: must be a positive"),
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(small=0), "latencies.0.ms.small: must be a positive"),
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(small="6"), "latencies.0.ms.small: must be a positive"),
        (LOCAL_PAIR, lambda d: d["latencies"][0]["ms"].update(large=[40.9, NAN]), "latencies.0.ms.large.1: must be"),
        (LOCAL_PAIR, local_latency(batch_sizes=[]), "latencies.0.batch_sizes: must list at least one"),
        (LOCAL_PAIR, local_latency(batch_sizes=[16, 1]), "latencies.0.batch_sizes.1: 1 follows 16"),
        (LOCAL_PAIR, local_latency(batch_sizes=[1, 1]), "latencies.0.batch_sizes.1: 1 follows 1"),
        (LOCAL_PAIR, local_latency(batch_sizes=[1, 100000000]), "latencies.0.batch_sizes.1: must lie in [1, 4096]"),
        (LOCAL_PAIR, local_latency(batch_sizes=[0, 16]), "latencies.0.batch_sizes.0: must lie in [1, 4096]"),
        (LOCAL_PAIR, local_latency(batch_sizes=[1, 8, 16]), "latencies.0.ms.large: needs one value per entry"),
        (LOCAL_PAIR, local_latency(batch_sizes=[1.0, 16]), "latencies.0.batch_sizes.0: Input should be a valid int"),
        (PAPER_PAIR, lambda d: d["latencies"][0]["ms"].update(small=[6.0]), "latencies.0.ms.small: a list needs"),
        (PAPER_PAIR, paper_routing(P=[[0.35, 0.35], [1.0, 0.0]]), "routing.0.P: row 0 sums to 0.7, must sum to 1"),
        (PAPER_PAIR, paper_routing(P=[[1.5, -0.5], [1.0, 0.0]]), "routing.0.P: row 0 has a negative"),
        (PAPER_PAIR, paper_routing(P=[[NAN, 0.5], [1.0, 0.0]]), "routing.0.P.0.0: must be a finite number"),
        (PAPER_PAIR, paper_routing(P=[[0.5, 0.5]]), "routing.0.P: must be 2 x 2"),
        (PAPER_PAIR, paper_routing(C=[[1.5, 0.0], [1.0, 0.0]]), "routing.0.C: C[0][0] = 1.5 exceeds 1"),
        (PAPER_PAIR, paper_routing(C=[[1.0, -0.1], [1.0, 0.0]]), "routing.0.C: row 0 has a negative"),
        (PAPER_PAIR, paper_routing(C=[[1.0, INF], [1.0, 0.0]]), "routing.0.C.0.1: must be a finite number"),
        (PAPER_PAIR, paper_routing(C=[[True, 0.0], [1.0, 0.0]]), "routing.0.C.0.0: must be a finite number"),
    ],
)
def test_a_bad_number_is_refused_at_load_naming_its_field(tmp_path: Path, name, edit, expected) -> None:
    path = pair_copy(tmp_path, name)
    edit_pair(path, edit)
    assert load_error(path).startswith(expected)


def second(section: str) -> Callable[[dict], object]:
    return lambda d: d[section].append({**d[section][0], "source": "a second entry"})


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        (PAPER_PAIR, second("latencies"), "latencies.1.hardware: 'a100-80g' is listed twice (also latencies.0)"),
        (PAPER_PAIR, second("routing"), "routing.1.router: 'r2r' is listed twice (also routing.0)"),
        (PAPER_PAIR, lambda d: d["tokenizer"].update(vocab_size="151936"), "tokenizer.vocab_size: Input should be"),
        (PAPER_PAIR, lambda d: d["tokenizer"].update(vocab_size=True), "tokenizer.vocab_size: Input should be"),
        (LOCAL_PAIR, lambda d: d["models"][0]["dims"].update(hidden_size="576"), "models.0.dims.hidden_size: Input"),
        (
            PAPER_PAIR,
            lambda d: d["models"][0].update(dims={"num_hidden_layers": 1, "hidden_size": 2, "vocab_size": 3}),
            "models.0.dims: give shape or dims, not both",
        ),
        (LOCAL_PAIR, lambda d: d["models"][0].pop("dims"), "models.0.dims: a recipe model needs dims"),
        (LOCAL_PAIR, lambda d: d["profiles"].update(gpu="calibration/profiles/none"), "profiles.gpu: no folder"),
        (PAPER_PAIR, lambda d: d.update(models=d["models"][::-1]), "models: must be named ['small', 'large']"),
        (PAPER_PAIR, lambda d: d["models"][0].pop("shape"), "models.0: give exactly one of shape and recipe"),
    ],
)
def test_duplicates_loose_types_and_missing_folders_are_refused(tmp_path: Path, name, edit, expected) -> None:
    path = pair_copy(tmp_path, name)
    edit_pair(path, edit)
    assert load_error(path).startswith(expected)


def test_a_key_given_twice_in_the_yaml_is_refused_not_overwritten(tmp_path: Path) -> None:
    path = pair_copy(tmp_path, PAPER_PAIR)
    text = path.read_text()
    path.write_text(text.replace("latencies:\n", "description: a second one\nlatencies:\n", 1))
    line = load_error(path)
    assert "key 'description' given twice" in line and "line" in line
    path.write_text(text.replace("ms: {small: 6.0, large: 27.9}", "ms: {small: 6.0, large: 27.9, small: 1.0}"))
    assert "key 'small' given twice" in load_error(path)


def test_a_bad_pair_is_not_blamed_on_an_option_the_user_never_typed(tmp_path: Path, monkeypatch) -> None:
    import trserve.paths

    path = pair_copy(tmp_path, PAPER_PAIR)
    edit_pair(path, paper_routing(P=[[0.35, 0.35], [1.0, 0.0]]))
    monkeypatch.setattr(trserve.paths, "MODELS_DIR", tmp_path)
    result = CliRunner().invoke(app, ["throughput", "--pair", PAPER_PAIR])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: routing.0.P: row 0 sums to 0.7, must sum to 1"


def test_the_committed_pairs_pass_every_check() -> None:
    for name in (LOCAL_PAIR, PAPER_PAIR, "qwen3-0.6b-8b"):
        read_pair_file(ROOT / "models" / name / "pair.yaml")
