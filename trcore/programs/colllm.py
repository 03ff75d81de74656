"""``colllm``: Co-LLM-style deferral (Shen et al., 2024): per token, a deferral score above ``eta`` means the
large model writes that token; the small model writes the rest."""

from __future__ import annotations

from collections.abc import Iterable

from trcore.program import register_program
from trcore.programs.detour import DetourProgram, RouterSpec, check_threshold, resolve_router
from trcore.programs.mlp import MLPRouter
from trcore.programs.signals import top1_probs
from trcore.step import StepResult


@register_program("colllm")
class CoLLMProgram(DetourProgram):
    """Parameters:

    * ``eta``: deferral threshold in [0, 1]; a token whose score exceeds it is written by the large model;
    * ``router``: optional learned deferral head (an :class:`MLPRouter` or the path to one), whose output
      probability is the deferral score. Without it the score is ``1 - p_top1``, the small model's own
      doubt about its best token (Co-LLM's deferral head is trained on the base model's hidden state; this
      confidence score is its training-free stand-in, computable from top-k logprobs alone).

    As in Co-LLM, the base (small) model decides at every position; a deferred position is written by the
    large model (the small model's token for it is dropped) and control returns to the small model at once.
    """

    def __init__(self, model: int, num_models: int, eta: float = 0.5, router: RouterSpec = None) -> None:
        self.eta = check_threshold("colllm.eta", eta)
        self.router: MLPRouter | None = None if router is None else resolve_router(router, "colllm")
        signals = frozenset({"token_ids", "top_logprobs"}) if self.router is None else self.router.required_signals
        super().__init__(model, num_models, self.eta, signals)

    def scores(self, step: StepResult) -> Iterable[float]:
        if self.router is not None:
            return list(self.router.scores(step))
        return [1.0 - p for p in top1_probs(step)]
