"""``citer``: CITER-style routing (Zheng et al., 2025): a learned token router sends low-confidence tokens to
the large model, which writes that one token and returns after it."""

from __future__ import annotations

from trcore.program import register_program
from trcore.programs.detour import DetourProgram, RouterSpec, check_threshold, resolve_router
from trcore.programs.mlp import FloatArray
from trcore.step import StepResult


@register_program("citer")
class CiterProgram(DetourProgram):
    """Parameters:

    * ``router``: an :class:`MLPRouter`, a path to its ``.npz`` (required: a config with ``pair:`` fills in its pair's);
    * ``threshold``: router probability above which the large model writes the token (default: the
      operating point stored with the router).

    The SLM's token is **replaced**, not kept: in CITER the router decides, per position, which model
    generates the token, so when it picks the large model the small model's token for that position is never
    used. Here the small model has already sampled it (the router reads that step's signals), so it is
    dropped and the large model writes the position, then returns after exactly one token.

    How it differs from ``r2r`` lies in the router file, not in the flow: CITER's router is trained to predict
    "the small model is wrong here" (its token differs from the large model's) from confidence signals only,
    where R2R's predicts divergence and also sees the sampled token's identity.
    """

    def __init__(self, model: int, num_models: int, router: RouterSpec = None, threshold: float | None = None) -> None:
        self.router = resolve_router(router, "citer")
        chosen = self.router.threshold if threshold is None else check_threshold("citer.threshold", threshold)
        super().__init__(model, num_models, chosen, self.router.required_signals)

    def scores(self, step: StepResult) -> FloatArray:
        return self.router.scores(step)
