"""``/admin/thresholds``: read the delayed-batching thresholds in force, or set a new vector by hand.

An operator pins a vector without a restart (``PUT``), and a benchmark switches to each phase's best vector at
its boundary (the oracle of ``benchmarks/adaptive_stack.py``). The vector reaches every subserver in one
message and takes effect at its next launch, as the adaptive controller's switches do; no request is restarted
or re-routed. With ``batching.thresholds: adaptive`` the controller owns the vector, and ``PUT`` is refused
(409) rather than silently overridden at its next decision.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

from trserve.config import ServeConfig
from trserve.frontend.book import FrontEnd
from trserve.frontend.errors import APIError


class ThresholdsBody(BaseModel):
    """``PUT /admin/thresholds``: one threshold per model, in the config's model order."""

    model_config = ConfigDict(extra="forbid", strict=True)  # ``true`` or ``"3"`` is not a threshold
    thresholds: list[int]


def thresholds_in_force(config: ServeConfig, fe: FrontEnd) -> dict[str, Any]:
    """The vector in force and where it came from (``config``, ``admin`` or ``adaptive``)."""
    if fe.tuner is not None:
        return {"thresholds": list(fe.tuner.thresholds), "source": "adaptive"}
    if fe.thresholds is None:
        raise APIError(409, f"thresholds: mode {config.mode!r} has no delayed batching", param="thresholds")
    return {"thresholds": list(fe.thresholds), "source": "admin" if fe.thresholds_set else "config"}


def checked_vector(config: ServeConfig, fe: FrontEnd, body: ThresholdsBody) -> tuple[int, ...]:
    """``body``'s vector, or a 4xx naming what is wrong with it."""
    thresholds_in_force(config, fe)  # 409 where there is nothing to set
    if fe.tuner is not None:
        raise APIError(409, "thresholds: batching.thresholds is adaptive; the controller sets them", param="thresholds")
    models = config.models
    if len(body.thresholds) != len(models):
        names = ", ".join(m.name for m in models)
        raise APIError(400, f"thresholds: need {len(models)} values ({names}), got {len(body.thresholds)}",
                       param="thresholds")  # fmt: skip
    for i, (b, model) in enumerate(zip(body.thresholds, models, strict=True)):
        cap = min(config.batching.max_batch or model.max_num_seqs, model.max_num_seqs)
        if not 1 <= b <= cap:
            raise APIError(400, f"thresholds.{i}: {model.name}'s must be in 1..{cap}, got {b}",
                           param=f"thresholds.{i}")  # fmt: skip
    return tuple(body.thresholds)


def install_admin_routes(app: FastAPI, config: ServeConfig, fe: FrontEnd) -> None:
    """``GET`` and ``PUT /admin/thresholds`` (behind the API key, as every route but health and metrics)."""

    @app.get("/admin/thresholds")
    async def get_thresholds() -> dict[str, Any]:
        return thresholds_in_force(config, fe)

    @app.put("/admin/thresholds")
    async def put_thresholds(body: ThresholdsBody) -> dict[str, Any]:
        vector = checked_vector(config, fe, body)
        fe.set_thresholds(vector)
        return thresholds_in_force(config, fe)
