"""``rstitch``: R-Stitch-style entropy switching (Chen et al., 2025): the small model hands uncertain tokens to
the large model, which keeps writing until it is confident again."""

from __future__ import annotations

import math

from trcore.errors import ConfigError
from trcore.program import RoutingProgram, register_program
from trcore.programs.detour import LARGE, SMALL, is_number, require_pair
from trcore.programs.signals import step_entropies
from trcore.step import Routing, StepResult

#: Where the entropy comes from: the backend's exact value, or top-k logprobs (tail lumped, a lower bound).
ENTROPY_SOURCES = ("top_logprobs", "entropy")


@register_program("rstitch")
class RStitchProgram(RoutingProgram):
    """Parameters:

    * ``tau``: entropy threshold in nats. On the small model, a token whose next-token entropy exceeds
      ``tau`` is dropped and the large model regenerates it;
    * ``tau_back``: on the large model, an entropy below it returns the request to the small model (its own
      token kept); defaults to ``tau``;
    * ``signal``: ``"top_logprobs"`` (default; what vLLM gives: the entropy is computed from the top-k with
      the tail mass lumped into one outcome, see :func:`entropy_from_top_logprobs`) or ``"entropy"`` (the
      backend supplies it exactly). When a step carries ``entropy`` it is used in either case.
    """

    def __init__(
        self,
        model: int,
        num_models: int,
        tau: float = 1.0,
        tau_back: float | None = None,
        signal: str = "top_logprobs",
    ) -> None:
        super().__init__(model, num_models)
        require_pair("rstitch", num_models)
        self.tau = _entropy_threshold("rstitch.tau", tau)
        self.tau_back = self.tau if tau_back is None else _entropy_threshold("rstitch.tau_back", tau_back)
        if signal not in ENTROPY_SOURCES:
            raise ConfigError(
                "rstitch.signal", f"unknown entropy source {signal!r}; valid: {', '.join(ENTROPY_SOURCES)}"
            )
        self.required_signals = frozenset({"token_ids", signal})

    def route(self, step: StepResult) -> Routing:
        entropies = step_entropies(step)
        if self.model == SMALL:
            dests = [LARGE if h > self.tau else SMALL for h in entropies]
            return Routing(dests, [dest == SMALL for dest in dests])
        return Routing([SMALL if h < self.tau_back else LARGE for h in entropies])


def _entropy_threshold(field: str, value: float) -> float:
    if not (is_number(value) and value >= 0 and math.isfinite(value)):
        raise ConfigError(field, f"must be a finite entropy >= 0 (nats), got {value!r}")
    return float(value)
