"""Where the time goes (an in-sample diagnosis, not a prediction: the scale factors come from the scored cells
themselves): re-predict each cell with the calibrated latencies rescaled to the step times the server
actually observed in that cell, to split the predictors' error into step-latency drift (the machine was slower
or faster than when it was calibrated, e.g. other work competing for the cores) and everything else (queueing,
routing assumptions, loop and transport overhead)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trcore.routing_stats import RoutingStats
from trcore.traces import RequestTrace
from trserve.crossval.plan import Rate, cell_load
from trserve.crossval.predict import Calibration, model_predictions, sim_prediction
from trserve.crossval.report import rel_error
from trserve.crossval.sim_open import replay_of
from trsim.latency import ScaledModel


def slowdowns(cell: Mapping[str, Any]) -> list[float]:
    """Per model: observed mean engine step time over the calibrated one at the cell's mean batch (1.0 where the
    model did not step)."""
    return [
        s["mean_step_s"] / p if s["num_steps"] and p > 0 else 1.0
        for s, p in zip(cell["steps"], cell["profile_step_s_at_mean_batch"], strict=True)
    ]


def rescaled(calibration: Calibration, factors: Sequence[float]) -> Calibration:
    """``calibration`` with model m's latencies multiplied by ``factors[m]``."""
    scaled = tuple(ScaledModel(m, f) for m, f in zip(calibration.latency, factors, strict=True))
    return replace(calibration, latency=scaled)


def add_rescaled_predictions(
    cells: list[dict[str, Any]],
    stats: Mapping[str, RoutingStats],
    traces: Mapping[str, Sequence[RequestTrace]],
    calibration: Calibration,
    contexts: Mapping[str, tuple[int, list[float]]],
    max_batch: int,
    sim_s: float,
) -> dict[str, Any]:
    """Fill ``slowdown``, ``model_rescaled_tok_s`` / ``sim_rescaled_tok_s`` and their errors on every cell (the
    model's None at a rate: it is closed-loop only); returns per router the median and max of those errors (over
    the cells that have them) and the median slowdown per model."""
    for cell in cells:
        router, load, b = cell["router"], cell_load(cell), tuple(cell["thresholds"])
        factors = slowdowns(cell)
        cal = rescaled(calibration, factors)
        context, extend = contexts[router]
        cell["slowdown"] = factors
        model = None
        if not isinstance(load, Rate):
            model = model_predictions(stats[router], cal, load, [b], context, max_batch, extend)[b]
        cell["model_rescaled_tok_s"] = model
        sim_load = replay_of(cell) if isinstance(load, Rate) else load  # the arrivals the cell's simulation replayed
        cell["sim_rescaled_tok_s"] = sim_prediction(traces[router], cal, sim_load, b, max_batch, sim_s)
        for p in ("model", "sim"):
            value = cell[f"{p}_rescaled_tok_s"]
            cell[f"{p}_rescaled_rel_error"] = None if value is None else rel_error(value, cell["measured_tok_s"])
    out: dict[str, Any] = {}
    for router in dict.fromkeys(c["router"] for c in cells):
        mine = [c for c in cells if c["router"] == router]
        entry: dict[str, Any] = {}
        for p in ("model", "sim"):
            errors = [c[f"{p}_rescaled_rel_error"] for c in mine if c[f"{p}_rescaled_rel_error"] is not None]
            entry[f"{p}_rescaled_median_rel_error"] = statistics.median(errors) if errors else None
            entry[f"{p}_rescaled_max_rel_error"] = max(errors) if errors else None
        num_models = len(mine[0]["slowdown"])
        entry["median_slowdown"] = [statistics.median(c["slowdown"][m] for c in mine) for m in range(num_models)]
        entry["median_busy_fraction"] = [
            statistics.median(c["steps"][m]["busy_fraction"] for c in mine) for m in range(num_models)
        ]
        out[router] = entry
    return out
