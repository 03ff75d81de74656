"""Training data for the learned token routers: the local pair's texts, per-token SLM signals and labels.

Recipe (R2R's data recipe, on the local pair): the large model answers every shipped prompt greedily; the
small model then reads the same sequence (teacher forcing) and, at every response position, we record what a
serving backend would show the router there: the small model's top-k log-probabilities and its greedy token.
Greedy decoding with an oracle router (the large model's token wherever the two differ) writes exactly the
large model's greedy text, so these are the positions the routed pair visits when its router is right.

Labels per position:

* ``mismatch``: the small model's greedy token differs from the large model's (CITER: "the SLM is wrong here");
* ``divergent``: a mismatch the large model itself finds implausible, i.e. gives the small model's token a
  probability below ``neutral_prob`` (R2R's neutral/divergent split; R2R judges neutrality with a verifier
  LLM on continuations, which this pair cannot afford, so the large model's own likelihood is the judge).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trcore.errors import ConfigError
from trcore.programs.signals import confidence_features
from trserve.paths import PROMPTS_DIR

#: Shipped prompts (JSONL, one ``{"id", "prompt"}`` object per line).
DEFAULT_PROMPTS = PROMPTS_DIR / "routing.jsonl"


@dataclass(frozen=True)
class TokenData:
    """Per response position of every prompt (rows aligned)."""

    features: np.ndarray  #: confidence features (trcore.programs.signals.confidence_features)
    token_ids: np.ndarray  #: the small model's greedy token
    mismatch: np.ndarray  #: 1 where the large model's greedy token differs
    llm_prob_of_slm: np.ndarray  #: the large model's probability of the small model's token
    prompt_index: np.ndarray  #: which prompt the row came from

    def divergent(self, neutral_prob: float) -> np.ndarray:
        return (self.mismatch == 1) & (self.llm_prob_of_slm < neutral_prob)

    def save(self, path: Path) -> None:
        np.savez_compressed(path, **{k: getattr(self, k) for k in self.__dataclass_fields__})

    @classmethod
    def load(cls, path: Path) -> TokenData:
        with np.load(path) as data:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def load_prompts(path: Path = DEFAULT_PROMPTS) -> list[str]:
    """The prompt texts of a JSONL prompt file."""
    prompts = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise ConfigError(f"prompts:{line_no}", 'each line must be an object with a "prompt" string')
            prompts.append(obj["prompt"])
    if not prompts:
        raise ConfigError("prompts", f"{path} holds no prompts")
    return prompts


def chat_token_ids(tokenizer: Any, prompt: str) -> list[int]:
    """A prompt as the OpenAI chat front end would feed it: one user message through the chat template."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def generate_greedy(
    model: Any, tokenizer: Any, prompts: Sequence[list[int]], max_new_tokens: int, batch_size: int = 8
) -> list[list[int]]:
    """Greedy answers (token ids, up to and including EOS) of ``model``, left-padded batches."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    answers: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad
            )
        for row in out[:, width:].tolist():
            answers.append(_cut_at_eos(row, tokenizer.eos_token_id))
    return answers


def _cut_at_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def label_positions(
    small: Any, large: Any, prompt_ids: list[int], answer_ids: list[int], top_k: int
) -> dict[str, list[Any]]:
    """Signals and labels at every answer position of one sequence (one forward pass per model)."""
    import torch

    seq = torch.tensor([prompt_ids + answer_ids])
    first, last = len(prompt_ids) - 1, len(prompt_ids) + len(answer_ids) - 1  # logits row p predicts p + 1
    with torch.no_grad():
        slm = torch.log_softmax(small(seq).logits[0, first:last].float(), dim=-1)
        llm = torch.log_softmax(large(seq).logits[0, first:last].float(), dim=-1)
    top_lp, top_ids = slm.topk(top_k, dim=-1)
    slm_tok, llm_tok = slm.argmax(-1), llm.argmax(-1)
    rows: dict[str, list[Any]] = {"features": [], "token_ids": [], "mismatch": [], "llm_prob_of_slm": []}
    for p in range(last - first):
        top = dict(zip(top_ids[p].tolist(), top_lp[p].tolist(), strict=True))
        token = int(slm_tok[p])
        rows["features"].append(confidence_features(top, token, top_k))
        rows["token_ids"].append(token)
        rows["mismatch"].append(int(token != int(llm_tok[p])))
        rows["llm_prob_of_slm"].append(float(llm[p, token].exp()))
    return rows


def build_token_data(
    small: Any, large: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, top_k: int
) -> TokenData:
    """Generate the large model's greedy answers and label every answer position (see module docstring)."""
    prompt_ids = [chat_token_ids(tokenizer, p) for p in prompts]
    answers = generate_greedy(large, tokenizer, prompt_ids, max_new_tokens)
    columns: dict[str, list[Any]] = {"features": [], "token_ids": [], "mismatch": [], "llm_prob_of_slm": []}
    index: list[int] = []
    for i, (ids, answer) in enumerate(zip(prompt_ids, answers, strict=True)):
        rows = label_positions(small, large, ids, answer, top_k)
        for key, values in rows.items():
            columns[key].extend(values)
        index.extend([i] * len(rows["token_ids"]))
    return TokenData(
        features=np.asarray(columns["features"], dtype=np.float32),
        token_ids=np.asarray(columns["token_ids"], dtype=np.int64),
        mismatch=np.asarray(columns["mismatch"], dtype=np.int8),
        llm_prob_of_slm=np.asarray(columns["llm_prob_of_slm"], dtype=np.float32),
        prompt_index=np.asarray(index, dtype=np.int32),
    )
