"""A user's own pair, made as docs/models.md says (a folder under models/, shapes in models/shapes/): a broken shape
file, a folder without its pair.yaml, a pair given as a path, a router naming a pair that is not here, and a pair
whose large model fits the GPUs but none of the planned concurrencies."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import trserve.paths
import trsim.pairs
from tokenrouter.cli import app
from trcore.errors import ConfigError
from trcore.programs import random_router
from trserve.config import ServeConfig
from trserve.pairs.check import check_pair
from trserve.pairs.fill import apply_pair
from trsim.kv import auto_capacity
from trsim.pairs import LOCAL_PAIR, describe_all_pairs, load_pair
from trsim.roofline import RooflineModel
from trsim.shapes import load_shape

ROOT = Path(__file__).resolve().parents[2]
PAIR = {
    "name": "my-pair",
    "description": "a user's pair",
    "tokenizer": {"name": "me/tok", "vocab_size": 151936, "source": "config.json"},
    "models": [{"name": "small", "shape": "Mine-Small"}, {"name": "large", "shape": "Qwen3-8B"}],
}


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of ``models/`` with the user's pair ``my-pair`` (its small model a shape of its own)."""
    models = tmp_path / "models"
    shutil.copytree(ROOT / "models", models)
    shutil.copy(models / "shapes" / "Qwen3-0.6B.json", models / "shapes" / "Mine-Small.json")
    (models / "my-pair").mkdir()
    (models / "my-pair" / "pair.yaml").write_text(yaml.safe_dump(PAIR, sort_keys=False))
    monkeypatch.setattr(trserve.paths, "MODELS_DIR", models)
    monkeypatch.setattr(trsim.pairs, "SHAPES_DIR", models / "shapes")
    assert load_pair("my-pair").dims(0).hidden_size == 1024
    return models


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        (json.dumps({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8}),
         "vocab_size: missing"),
        (json.dumps({"num_hidden_layers": 2, "hidden_size": "8", "num_attention_heads": 2, "intermediate_size": 8,
                     "vocab_size": 16}), "hidden_size: must be an integer >= 1, got '8'"),
    ],
)  # fmt: skip
def test_a_broken_shape_file_is_one_line_naming_it_and_the_pair_field(models_dir: Path, text, problem) -> None:
    # a shape lacking vocab_size was a KeyError traceback in the router check, bad JSON a line naming no file
    shape = models_dir / "shapes" / "Mine-Small.json"
    shape.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_pair("my-pair")
    assert str(err.value).startswith(f"{models_dir / 'my-pair' / 'pair.yaml'}: models.0.shape: {shape}: {problem}")
    with pytest.raises(ConfigError, match=problem):
        load_shape("Mine-Small", models_dir / "shapes")
    described, errors = describe_all_pairs()
    assert "my-pair" not in [p["name"] for p in described] and len(errors) == 1


def test_a_pair_folder_without_its_pair_yaml_is_named_not_skipped(models_dir: Path) -> None:
    folder = models_dir / "my-pair"
    (folder / "pair.yaml").rename(folder / "pair.yml")
    with pytest.raises(ConfigError, match=f"unknown pair 'my-pair'; {folder} holds no pair.yaml; valid: local"):
        load_pair("my-pair")
    _, errors = describe_all_pairs()
    assert [str(e) for e in errors] == [f"{folder}: no pair.yaml in this pair folder"]
    result = CliRunner().invoke(app, ["simulate", "--pair", "my-pair", "--tokens", "100"])
    assert result.exit_code == 2 and "holds no pair.yaml" in result.output


@pytest.mark.parametrize("name", ["../models/my-pair", "my-pair/", "./my-pair", "{models}/my-pair"])
def test_a_pair_is_a_name_not_a_path(models_dir: Path, name: str) -> None:
    # a serve config's pair: took any path to a folder whose pair.yaml named it; --pair took only names
    name = name.format(models=models_dir)
    with pytest.raises(ConfigError, match=f"pair: unknown pair '{name}'; valid: local-smollm2, my-pair"):
        apply_pair({"pair": name, "backend": "emulated", "models": [{"name": "small"}, {"name": "large"}]})


def test_an_empty_pair_name_is_refused_not_the_default() -> None:
    # simulate --pair '' simulated the default pair
    for command in (["simulate", "--tokens", "100"], ["sweep", "--concurrency", "2", "--tokens", "100"]):
        result = CliRunner().invoke(app, [*command, "--pair", ""])
        assert result.exit_code == 2 and "error: --pair: unknown pair ''" in result.output, result.output


def test_a_router_naming_a_pair_that_is_not_here_is_blamed_on_the_router(tmp_path: Path, caplog) -> None:
    router = random_router(np.random.default_rng(0), top_k=4)
    router = type(router)(**{**router.__dict__, "meta": {"pair": {"name": "gone-pair"}}})
    router.save(tmp_path / "gone.npz")
    models = [{"name": "small", "emulated": {"latency_ms": 5.0}}, {"name": "large", "emulated": {"latency_ms": 9.0}}]
    data = {"pair": LOCAL_PAIR, "backend": "emulated", "models": models,
            "router": {"program": "r2r", "params": {"router": str(tmp_path / "gone.npz")}}}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        check_pair(ServeConfig.model_validate(data), [])
    assert str(err.value).startswith(f"router.params.router: {tmp_path / 'gone.npz'} was trained on pair 'gone-pair'")
    assert "allow_other_pair" in str(err.value)
    check_pair(ServeConfig.model_validate({**data, "allow_other_pair": True}), [])
    assert "gone-pair" in caplog.text


def test_kv_auto_for_a_model_whose_weights_fill_the_gpu_says_so() -> None:
    # the error was "tokens must be a number of at least one block (16) or 'auto', got 0"
    too_big = RooflineModel("a100-80g", "Qwen3-32B", 1, "fp32")
    with pytest.raises(ConfigError, match=r"--kv-tokens: 'auto': .*Qwen3-32B.* 131\.\d GB of weights .*raise tp"):
        auto_capacity(too_big, None, "--kv-tokens")
    assert auto_capacity(RooflineModel("a100-80g", "Qwen3-32B", 2, "fp32"), None) > 0


def test_a_plan_where_only_the_large_model_fits_but_runs_no_concurrency_is_an_error() -> None:
    # was an empty table, "only the large model alone is planned" and exit 0: Qwen3-32B alone holds ~25k KV
    # tokens on one A100-80G, fewer than 8 requests of 16k context
    result = CliRunner().invoke(app, ["plan", "--gpus", "1", "--models", "small=Qwen3-8B,large=Qwen3-32B", "-N", "8",
                                      "--context", "16384", "--thresholds", "1,1", "--open-loop-top", "0",
                                      "--workers", "1", "--json"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "error: --concurrency: no placement of ['Qwen3-8B', 'Qwen3-32B'] fits 1 a100-80g, and the large model " \
        "alone runs none of N = [8]" in " ".join(result.output.split())  # fmt: skip


def test_a_router_of_another_pair_copied_into_the_users_folder_is_refused(models_dir: Path, caplog) -> None:
    # the folder made it my-pair's router: SmolLM2's r2r (a row per id of a 49152-token vocabulary) served my-pair
    routers = models_dir / "my-pair" / "routers"
    shutil.copytree(models_dir / LOCAL_PAIR / "routers", routers)
    spec = {**PAIR, "routers": {"r2r": {"weights": "routers/r2r.npz", "record": "routers/r2r.json"}}}
    (models_dir / "my-pair" / "pair.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    models = [{"name": "small", "emulated": {"latency_ms": 5.0}}, {"name": "large", "emulated": {"latency_ms": 9.0}}]
    data = {"pair": "my-pair", "backend": "emulated", "models": models, "router": {"program": "r2r"}}
    with pytest.raises(ConfigError) as err:
        check_pair(ServeConfig.model_validate(apply_pair(data)), [])
    assert str(err.value).startswith(
        f"router.params.router: {routers / 'r2r.npz'} has a token table of 49152 ids, not the small model's 151936: "
        "it was not trained on pair my-pair"
    )
    check_pair(ServeConfig.model_validate({**apply_pair(data), "allow_other_pair": True}), [])
    assert "not trained on pair my-pair" in caplog.text
    check_pair(ServeConfig.model_validate(apply_pair({**data, "pair": LOCAL_PAIR})), [])  # where it belongs


def test_models_list_shows_the_batch_sizes_of_latency_lists_and_the_routing_c() -> None:
    # the local pair listed ms [18.9, 24.7] with no batch sizes, and the paper's routing P without C
    result = CliRunner().invoke(app, ["models", "list", "--json"])
    pairs = {p["name"]: p for p in json.loads(result.stdout)["pairs"]}
    assert pairs[LOCAL_PAIR]["latencies"][0]["batch_sizes"] == [1, 16]
    assert pairs["r2r-qwen-1.5b-32b"]["routing"][0]["C"] == [[1.0, 0.0], [1.0, 0.0]]
    text = CliRunner().invoke(app, ["models", "list"], terminal_width=400).stdout
    assert "[40.9, 54.9]} at batch sizes [1, 16] (" in text and "C=[[1.0, 0.0], [1.0, 0.0]]" in text


def test_a_pair_fills_a_config_that_lists_its_models_large_first_by_name() -> None:
    # the model named large got the small model's 6.0 ms, and markov the pair's P in the pair's order
    data = {"pair": "r2r-qwen-1.5b-32b", "backend": "emulated", "entry_model": 1,
            "models": [{"name": "large"}, {"name": "small"}], "router": {"program": "markov"}}  # fmt: skip
    filled = apply_pair(data)
    assert [m["emulated"]["latency_ms"] for m in filled["models"]] == [27.9, 6.0]
    params = filled["router"]["params"]
    assert params["P"] == [[0.0, 1.0], [0.35, 0.65]] and params["C"] == [[0.0, 1.0], [0.0, 1.0]]
    by_place = apply_pair({**data, "models": [{"name": "a"}, {"name": "b"}]})  # names the pair does not know
    assert [m["emulated"]["latency_ms"] for m in by_place["models"]] == [6.0, 27.9]
    assert by_place["router"]["params"]["P"] == [[0.65, 0.35], [1.0, 0.0]]
    alone = apply_pair({**data, "entry_model": 0, "models": [{"name": "large"}], "router": {"program": "rstitch"}})
    assert alone["models"][0]["emulated"]["latency_ms"] == 27.9


def test_latency_of_a_model_that_does_not_fit_the_gpu_says_so() -> None:
    # printed an fp32 Qwen3-32B step on one A100-80G (131 GB of weights) as if it could run there
    args = ["latency", "--hardware", "a100-80g", "--shape", "Qwen3-32B"]
    too_big = CliRunner().invoke(app, [*args, "--dtype", "fp32"], terminal_width=300)
    assert too_big.exit_code == 0 and "note: 131.0 GB of weights per GPU leave no KV cache" in too_big.output
    assert "does not fit" not in CliRunner().invoke(app, args, terminal_width=300).output


def test_a_refusal_shows_the_whole_tokenizer_name_of_each_side(models_dir: Path) -> None:
    # both sides read "tokenizer name:meta-llama/Lla": names were cut to 19 characters like hashes
    for name, tokenizer in (("my-pair", "meta-llama/Llama-3.2-1B"), ("other-pair", "meta-llama/Llama-3.1-70B")):
        (models_dir / name).mkdir(exist_ok=True)
        spec = {**PAIR, "name": name, "tokenizer": {**PAIR["tokenizer"], "name": tokenizer}}
        (models_dir / name / "pair.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    router = random_router(np.random.default_rng(0), top_k=4)
    type(router)(**{**router.__dict__, "meta": {"pair": {"name": "other-pair"}}}).save(models_dir / "other.npz")
    models = [{"name": "small", "emulated": {"latency_ms": 5.0}}, {"name": "large", "emulated": {"latency_ms": 9.0}}]
    data = {"pair": "my-pair", "backend": "emulated", "models": models,
            "router": {"program": "citer", "params": {"router": str(models_dir / "other.npz")}}}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        check_pair(ServeConfig.model_validate(data), [])
    assert "(tokenizer name:meta-llama/Llama-3.1-70B, vocab" in str(err.value)
    assert "(tokenizer name:meta-llama/Llama-3.2-1B, vocab" in str(err.value)


def test_a_tokenizer_with_more_ids_than_a_models_embedding_is_refused(models_dir: Path) -> None:
    """pair.yaml's tokenizer.vocab_size was never compared with the shapes': a token id past a model's embedding."""
    shape = models_dir / "shapes" / "Mine-Small.json"
    shape.write_text(json.dumps({**json.loads(shape.read_text()), "vocab_size": 32000}))
    with pytest.raises(
        ConfigError, match=r"tokenizer\.vocab_size: 151936 ids, but models\.0's shape 'Mine-Small' embeds 32000"
    ):
        load_pair("my-pair")
