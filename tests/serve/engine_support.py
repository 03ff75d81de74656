"""Shared helpers of the StepEngine tests: where the model pair is, engine and reference-model construction."""

from __future__ import annotations

import functools

#: Small engines: the tests need a few hundred tokens of KV, and several helpers share this machine's memory.
TEST_ENGINE = {"max_model_len": 512, "kv_cache_gib": 0.25, "max_num_seqs": 16, "dtype": "float32"}

PROMPT_TEXTS = (
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Write a short poem about the sea. The sea",
    "Question: what is 12 times 7? Answer:",
)


@functools.cache
def model_dirs() -> tuple[str, str]:
    """(large, small) checkpoint directories of the local pair (``tokenrouter models prepare`` builds them if
    missing; the same function backs the ``prepared_pair`` fixture)."""
    from trserve.modelprep.pair import prepared_pair

    large, small = prepared_pair()
    return str(large), str(small)


def start_engine(model_dir: str, **overrides: object):
    from trserve.engine.step_engine import StepEngine
    from trserve.engine.types import EngineConfig

    return StepEngine(EngineConfig(model_dir, **{**TEST_ENGINE, **overrides}))  # type: ignore[arg-type]


@functools.cache
def hf_model(model_dir: str):
    """The transformers model (float32, eval) used as the reference; cached per process."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.eval()


@functools.cache
def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def sample_prompts() -> list[list[int]]:
    """Token ids of a few real prompts (real text gives real, non-degenerate continuations)."""
    tokenizer = _tokenizer(model_dirs()[0])
    return [list(tokenizer(text)["input_ids"]) for text in PROMPT_TEXTS]


def greedy_next(model, token_ids: list[int]):
    """Reference: the model's greedy token after ``token_ids`` (whole-sequence forward) and its logprobs."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([token_ids])).logits[0, -1].float()
    return int(logits.argmax()), torch.log_softmax(logits, dim=-1)
