"""``r2r``: R2R-style routing (Fu et al., 2025): a learned router on the small model's signals flags tokens that
diverge from what the large model would write; the large model regenerates each flagged token."""

from __future__ import annotations

from trcore.program import register_program
from trcore.programs.detour import DetourProgram, RouterSpec, check_threshold, resolve_router
from trcore.programs.mlp import FloatArray
from trcore.step import StepResult


@register_program("r2r")
class R2RProgram(DetourProgram):
    """Parameters:

    * ``router``: an :class:`MLPRouter`, a path to its ``.npz`` (required: a config with ``pair:`` fills in its pair's).
      Features: top-k log-probabilities and derived confidence, the sampled token (a learned per-token row),
      and the hidden state when the router was trained on it (then the backend must supply ``hidden``);
    * ``threshold``: divergence probability above which the token goes to the large model (default: the
      operating point stored with the router).

    On the small model, a flagged token is dropped and the large model writes that position, then hands
    straight back; the large model never stays for a second token.
    """

    def __init__(self, model: int, num_models: int, router: RouterSpec = None, threshold: float | None = None) -> None:
        self.router = resolve_router(router, "r2r")
        chosen = self.router.threshold if threshold is None else check_threshold("r2r.threshold", threshold)
        super().__init__(model, num_models, chosen, self.router.required_signals)

    def scores(self, step: StepResult) -> FloatArray:
        return self.router.scores(step)
