"""Shape-only model configs (``models/shapes/<name>.json``): lookup, parameter counts, vLLM-openable dirs.

A shape config is an HF ``config.json`` of a public model without its weights. vLLM runs one with
``load_format="dummy"`` (random weights) and ``skip_tokenizer_init=True`` (prompts given as token ids);
transformers builds one with ``AutoConfig.for_model(...)`` + ``AutoModelForCausalLM.from_config``. Latency
depends on shapes only, so these give realistic step times for GPU calibration without downloading anything.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.paths import SHAPES_DIR

#: Architectures :func:`parameter_count` knows: Qwen2 has q/k/v biases, Qwen3 has per-head q/k RMSNorms instead.
SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3")
#: What every user of a shape reads (the roofline, a pair's dimensions): each a positive integer.
REQUIRED_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a dense decoder, split the way model cards report them."""

    embedding: int  # input embeddings plus the LM head when it is not tied to them
    non_embedding: int

    @property
    def total(self) -> int:
        return self.embedding + self.non_embedding


def shape_names(shapes_dir: Path = SHAPES_DIR) -> list[str]:
    """Names of the shipped shape configs (file stems)."""
    return sorted(p.stem for p in shapes_dir.glob("*.json"))


def load_shape(name: str, shapes_dir: Path = SHAPES_DIR) -> dict[str, Any]:
    """The config dict of shape ``name``; an unknown name lists the valid ones, a file that is not a decoder
    config (bad JSON, a :data:`REQUIRED_FIELDS` entry missing or not a positive integer) is an error naming it."""
    path = shapes_dir / f"{name}.json"
    if not path.is_file():
        raise ConfigError("shape", f"unknown shape {name!r}; valid: {', '.join(shape_names(shapes_dir))}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must be a JSON object (an HF config.json)")
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise ConfigError(str(path), f"{key}: missing (a decoder's config.json has it)")
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(str(path), f"{key}: must be an integer >= 1, got {value!r}")
    return data


def parameter_count(config: dict[str, Any]) -> ParameterCount:
    """Parameter count of a Qwen2/Qwen3 decoder from its config alone.

    Per layer: q/k/v/o projections (Qwen2 adds biases on q, k, v; Qwen3 adds q_norm and k_norm of ``head_dim``
    each), a SwiGLU MLP (gate, up, down), two RMSNorms. Plus the final norm, the embedding matrix, and an LM
    head of the same size unless ``tie_word_embeddings``.
    """
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError("model_type", f"{model_type!r} not supported; valid: {', '.join(SUPPORTED_MODEL_TYPES)}")
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    if model_type == "qwen2":
        attention += q_width + 2 * kv_width  # q/k/v biases
    else:
        attention += 2 * head_dim  # q_norm, k_norm
    mlp = 3 * hidden * config["intermediate_size"]
    per_layer = attention + mlp + 2 * hidden
    non_embedding = config["num_hidden_layers"] * per_layer + hidden
    embedding = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return ParameterCount(embedding=embedding, non_embedding=non_embedding)


def shape_model_dir(name: str, out_dir: Path, shapes_dir: Path = SHAPES_DIR) -> Path:
    """Write ``out_dir/<name>/config.json`` so that vLLM (``load_format="dummy"``) can open it as a model."""
    load_shape(name, shapes_dir)  # validates the name
    target = out_dir / name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shapes_dir / f"{name}.json", target / "config.json")
    return target
