"""Shape-only configs under models/shapes: the published parameter counts, and transformers builds them."""

import json

import pytest

from trcore.errors import ConfigError
from trsim.shapes import SHAPES_DIR, load_shape, parameter_count, shape_model_dir, shape_names

# (total, non-embedding) parameters as the model cards state them ("Number of Parameters"). The R1 distills keep
# their base models' shapes: 1.5B = Qwen2.5-Math-1.5B with an untied head (hub: 1.78B; non-embedding as
# Qwen2.5-1.5B's card: 1.31B), 32B = Qwen2.5-32B (card: 32.5B / 31.0B).
PUBLISHED = {
    "Qwen3-0.6B": (0.6e9, 0.44e9),
    "Qwen3-1.7B": (1.7e9, 1.4e9),
    "Qwen3-4B": (4.0e9, 3.6e9),
    "Qwen3-8B": (8.2e9, 6.95e9),
    "Qwen3-32B": (32.8e9, 31.2e9),
    "DeepSeek-R1-Distill-Qwen-1.5B": (1.78e9, 1.31e9),
    "DeepSeek-R1-Distill-Qwen-32B": (32.5e9, 31.0e9),
}


def test_every_paper_model_has_a_shape():
    assert set(shape_names()) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_within_two_percent_of_published(name):
    count = parameter_count(load_shape(name))
    total, non_embedding = PUBLISHED[name]
    assert count.total == pytest.approx(total, rel=0.02)
    assert count.non_embedding == pytest.approx(non_embedding, rel=0.02)


def test_formula_on_a_hand_counted_qwen3():
    # hidden 4, 2 heads of dim 2 (q width 4), 1 kv head (kv width 2), mlp 6, vocab 10, 1 layer, tied head:
    # attention 4*4 + 2*4*2 + 4*4 = 48, q/k norms 2*2 = 4, mlp 3*4*6 = 72, 2 norms 8, final norm 4, embedding 40
    config = {"model_type": "qwen3", "hidden_size": 4, "vocab_size": 10, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 2, "intermediate_size": 6, "num_hidden_layers": 1,
              "tie_word_embeddings": True}  # fmt: skip
    count = parameter_count(config)
    assert (count.embedding, count.non_embedding) == (40, 48 + 4 + 72 + 8 + 4)
    qwen2 = parameter_count({**config, "model_type": "qwen2", "tie_word_embeddings": False})
    assert (qwen2.embedding, qwen2.non_embedding) == (80, 48 + (4 + 2 + 2) + 72 + 8 + 4)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_transformers_builds_the_shape_on_meta_with_the_formula_count(name):
    import torch
    import transformers

    data = load_shape(name)
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == data["architectures"][0]
    assert sum(p.numel() for p in model.parameters()) == parameter_count(load_shape(name)).total


def test_shape_model_dir_is_a_config_directory(tmp_path):
    target = shape_model_dir("Qwen3-0.6B", tmp_path)
    assert json.loads((target / "config.json").read_text()) == load_shape("Qwen3-0.6B")


def test_unknown_shape_lists_valid_names():
    with pytest.raises(ConfigError, match=r"Qwen3-0\.6B"):
        load_shape("Qwen3-999B")
    with pytest.raises(ConfigError, match="qwen2, qwen3"):
        parameter_count({"model_type": "llama"})
    assert SHAPES_DIR.is_dir()
