"""``mixture``: a stochastic ensemble: before every token, the model that writes it is drawn by fixed weights."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from trcore.errors import ConfigError
from trcore.program import RoutingProgram, register_program
from trcore.step import Routing, StepResult


@register_program("mixture")
class MixtureProgram(RoutingProgram):
    """Parameters:

    * ``weights``: one non-negative weight per model (normalized; e.g. ``[0.5, 0.3, 0.2]``); the next token's
      model is drawn from them independently of the current model and of everything else;
    * ``rng``: a ``random.Random``; or ``seed`` (int) to make one. Each model's instance draws from its own
      stream, seeded by ``(seed, model)``, so runs are reproducible whatever the other models do.

    Every token is kept: the drawing happens after a token is written and decides who writes the next one.
    Works for two models as well as for three or more.
    """

    def __init__(
        self,
        model: int,
        num_models: int,
        weights: Sequence[float] | None = None,
        seed: int | None = 0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(model, num_models)
        self.weights = _normalized(weights if weights is not None else [1.0] * num_models, num_models)
        self.rng = rng if rng is not None else random.Random(f"mixture:{seed}:{model}")
        self._models = list(range(num_models))

    def route(self, step: StepResult) -> Routing:
        return Routing(self.rng.choices(self._models, weights=self.weights, k=len(step)))


def _normalized(weights: Sequence[float], num_models: int) -> list[float]:
    if len(weights) != num_models:
        raise ConfigError("mixture.weights", f"needs one weight per model ({num_models}), got {len(weights)}")
    if any(not (w >= 0 and math.isfinite(w)) for w in weights):
        raise ConfigError("mixture.weights", f"weights must be finite and >= 0, got {list(weights)}")
    total = float(sum(weights))
    if total <= 0:
        raise ConfigError("mixture.weights", "at least one weight must be > 0")
    return [w / total for w in weights]
