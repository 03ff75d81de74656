"""The small model's output head: a least-squares map from its last hidden state to the large model's.

A model made of the large model's first k layers, read out through the large model's own norm and head, agrees
with the large model's greedy token only a few percent of the time: layer k's hidden state is not in the
basis the head expects. A linear "tuned lens" fixes much of that at no extra step cost: on calibration text,
fit ``A`` (hidden x hidden, ridge regression) so that ``rms(h_k) @ A`` approximates the large model's final
normed hidden state, then fold it into an untied head ``W @ A.T`` (the small model's final norm keeps unit
weights). The fit is closed form and deterministic for given weights and text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Ridge strength relative to the number of fitted positions (the rows of X have unit RMS).
RIDGE = 0.003
#: Leading positions of every sequence left out of the fit: the first token's hidden state is an outlier
#: (attention sink) that no linear map serves well.
SKIP_POSITIONS = 1


def calibration_prompt_ids(tokenizer: Any, prompt: str, chat: bool) -> list[int]:
    """A calibration prompt as token ids: through the chat template (one user turn) or as raw text."""
    if not chat:
        return list(tokenizer(prompt)["input_ids"])
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def calibration_sequences(tokenizer: Any, path: Path) -> list[list[int]]:
    """Prompt + answer token ids of every row of a ``small_calibration_answers.jsonl`` file."""
    sequences = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"]
            sequences.append(calibration_prompt_ids(tokenizer, row["prompt"], row.get("chat", True)) + list(answer))
    return sequences


def fit_head(model: Any, num_layers: int, sequences: Sequence[list[int]], ridge: float = RIDGE) -> tuple[Any, dict]:
    """The untied head (vocab x hidden) for a cut of ``model`` to ``num_layers`` layers, and fit statistics."""
    import torch

    eps = float(model.config.rms_norm_eps)
    hidden = model.config.hidden_size
    xtx = torch.zeros(hidden, hidden, dtype=torch.float64)
    xty = torch.zeros(hidden, hidden, dtype=torch.float64)
    features, targets, logits_argmax = [], [], []
    for ids in sequences:
        x, y, top = _hidden_pair(model, ids, num_layers, eps)
        xtx += x.T @ x
        xty += x.T @ y
        features.append(x)
        targets.append(y)
        logits_argmax.append(top)
    num_positions = sum(len(x) for x in features)
    lens = torch.linalg.solve(xtx + ridge * num_positions * torch.eye(hidden, dtype=torch.float64), xty)
    head = (model.lm_head.weight.detach().double() @ lens.T).float()
    stats = {
        "num_sequences": len(sequences),
        "num_positions": num_positions,
        "ridge": ridge,
        "agreement_with_large_on_calibration_text": _agreement(features, logits_argmax, head),
        "agreement_without_fit_on_calibration_text": _agreement(
            features, logits_argmax, model.lm_head.weight.detach() * model.model.norm.weight.detach()
        ),
    }
    return head, stats


def _hidden_pair(model: Any, ids: list[int], num_layers: int, eps: float) -> tuple[Any, Any, Any]:
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    start = SKIP_POSITIONS
    cut = out.hidden_states[num_layers][0, start:].double()  # after the first num_layers decoder layers
    x = cut * torch.rsqrt(cut.pow(2).mean(-1, keepdim=True) + eps)
    final = model.model.norm(out.hidden_states[-1][0, start:]) if _is_pre_norm(model, out) else None
    y = (out.hidden_states[-1][0, start:] if final is None else final).double()
    return x, y, out.logits[0, start:].argmax(-1)


def _is_pre_norm(model: Any, out: Any) -> bool:
    # transformers versions differ on whether the last hidden state is recorded before or after the final norm;
    # the one that reproduces the logits is the normed one.
    import torch

    last = out.hidden_states[-1][0, -1:]
    direct = last @ model.lm_head.weight.T
    return not torch.allclose(direct, out.logits[0, -1:], rtol=1e-3, atol=1e-3)


def _agreement(features: Sequence[Any], logits_argmax: Sequence[Any], head: Any) -> float:
    hits = total = 0
    for x, top in zip(features, logits_argmax, strict=True):
        hits += int(((x.float() @ head.float().T).argmax(-1) == top).sum())
        total += len(top)
    return hits / max(total, 1)
