"""Scoring routed answers under the large model: a teacher-forced forward pass (transformers, float32, CPU) gives
each output token's log-probability and whether it is the large model's own greedy choice there.

Cheap enough for a sweep on two shared cores: one torch thread (more threads on a contended machine ran ten times
slower), each prompt's KV cache computed once and cropped back after every answer, and every distinct
(prompt, answer) scored once across sweep points (most points repeat most answers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenScores:
    """Per answer: the summed log-probability of its tokens, their count, and how many are the large model's
    argmax given the same prefix (token agreement)."""

    sum_logprob: float
    num_tokens: int
    num_argmax: int


class LargeScorer:
    """The large model loaded with transformers for teacher-forced scoring."""

    def __init__(self, model_path: str, num_threads: int = 1) -> None:
        import torch  # heavy: only where a scorer is built
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(num_threads)
        self.torch = torch
        self.model: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.eval()
        self._prompts: dict[tuple[int, ...], tuple[Any, Any]] = {}
        self._scores: dict[tuple[tuple[int, ...], tuple[int, ...]], TokenScores] = {}

    def score(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> TokenScores:
        """Log-probabilities of ``output_ids`` after ``prompt_ids`` under the large model (memoized)."""
        key = (tuple(prompt_ids), tuple(output_ids))
        if key not in self._scores:
            self._scores[key] = self._score(*key) if output_ids else TokenScores(0.0, 0, 0)
        return self._scores[key]

    def _prompt_state(self, prompt: tuple[int, ...]) -> tuple[Any, Any]:
        """The prompt's KV cache and its last position's logits."""
        if prompt not in self._prompts:
            with self.torch.inference_mode():
                out = self.model(self.torch.tensor([list(prompt)]), use_cache=True)
            self._prompts[prompt] = (out.past_key_values, out.logits[0, -1:].float())
        return self._prompts[prompt]

    def _score(self, prompt: tuple[int, ...], output: tuple[int, ...]) -> TokenScores:
        torch = self.torch
        cache, first_logits = self._prompt_state(prompt)
        with torch.inference_mode():
            if len(output) > 1:
                out = self.model(torch.tensor([list(output[:-1])]), past_key_values=cache, use_cache=True)
                cache.crop(-(len(output) - 1))
                logits = torch.cat([first_logits, out.logits[0].float()])
            else:
                logits = first_logits
            logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(list(output))
        chosen = logprobs.gather(1, target[:, None])[:, 0]
        num_argmax = int((logprobs.argmax(dim=-1) == target).sum())
        return TokenScores(float(chosen.sum()), len(output), num_argmax)
