"""The one-token detour shared by ``r2r``, ``citer`` and ``colllm``: the small model writes, a per-token score
sends single tokens to the large model, which writes that token and hands straight back."""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable

from trcore.errors import ConfigError
from trcore.program import RoutingProgram
from trcore.programs.mlp import MLPRouter
from trcore.step import Routing, StepResult

#: Model indices by convention: 0 is the small model (SLM), 1 the large one (LLM).
SMALL, LARGE = 0, 1

RouterSpec = MLPRouter | str | os.PathLike[str] | None


def require_pair(program: str, num_models: int) -> None:
    """Programs written for a small/large pair refuse other model counts."""
    if num_models != 2:
        raise ConfigError("num_models", f"{program} routes between 2 models (0 = small, 1 = large), got {num_models}")


def resolve_router(router: RouterSpec, program: str) -> MLPRouter:
    """A router object as given, or loaded from a path. A trained router belongs to one model pair, so there is no
    default here: the serve config's ``pair:`` supplies its pair's router (``trserve.pairs.fill``)."""
    if isinstance(router, MLPRouter):
        return router
    if router is None:
        raise ConfigError(
            f"{program}.router", "needs a trained router: router=PATH, or a config with `pair:` whose pair has one"
        )
    if not os.path.exists(router):
        raise ConfigError(f"{program}.router", f"no router weights at {os.fspath(router)}; train them or pass another")
    return MLPRouter.load(router)


def check_threshold(field: str, value: float, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` as a float within [low, high]; anything else (NaN, ``true``, ``"0.5"``) is a ConfigError."""
    if not is_number(value) or not low <= value <= high:
        raise ConfigError(field, f"must be within [{low}, {high}], got {value!r}")
    return float(value)


def is_number(value: object) -> bool:
    """A real number, not a bool (YAML's ``yes`` or ``true`` where a threshold belongs is a mistake, not 1)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class DetourProgram(RoutingProgram):
    """On the small model: a token whose score exceeds ``threshold`` is dropped and the request goes to the
    large model, which regenerates exactly that token and always returns to the small model (its token kept).

    Subclasses supply :meth:`scores` and pass the signals it reads as ``small_signals``.
    """

    def __init__(self, model: int, num_models: int, threshold: float, small_signals: frozenset[str]) -> None:
        super().__init__(model, num_models)
        require_pair(type(self).name or type(self).__name__, num_models)
        self.threshold = threshold
        # The large model only hands back, so it needs nothing beyond the sampled tokens.
        self.required_signals = small_signals if model == SMALL else frozenset({"token_ids"})

    def scores(self, step: StepResult) -> Iterable[float]:
        """Per request of a small-model step: how strongly its token should go to the large model."""
        raise NotImplementedError

    def route(self, step: StepResult) -> Routing:
        if self.model == LARGE:
            return Routing([SMALL] * len(step))
        dests = [LARGE if score > self.threshold else SMALL for score in self.scores(step)]
        return Routing(dests, [dest == SMALL for dest in dests])
