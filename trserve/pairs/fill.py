"""A serve config's ``pair:``: what the named model pair fills into the config before it is validated.

With ``pair: <name>`` (or ``--pair``), a config may leave out what the pair already says: a learned router's
weights (``router.params.router`` for ``r2r`` / ``citer``: the pair's own), the ``markov`` program's routing
statistics (P and C: the pair's first ``routing`` entry) and, with ``backend: emulated``, each model's step time
(``emulated.latency_ms``: the pair's first ``latencies`` entry). Anything the config gives itself wins. Whether
the artifacts then fit the served models is checked at start-up (:mod:`trserve.pairs.check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trcore.errors import ConfigError
from trsim.pairs import Pair, load_pair

#: Routing programs that read a trained router, which belongs to one pair.
LEARNED_PROGRAMS = ("r2r", "citer")


def apply_pair(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a raw serve config) with the gaps its ``pair`` fills; unchanged without ``pair``."""
    name = data.get("pair")
    if name is None:
        return data
    if not isinstance(name, str):
        raise ConfigError("pair", f"must be a pair name, got {name!r}")
    pair = load_pair(name)
    data = dict(data)
    data["router"] = _router(dict(data.get("router") or {}), pair)
    if data.get("backend") == "emulated" and isinstance(data.get("models"), list):
        data["models"] = [_emulated(m, i, pair) for i, m in enumerate(data["models"])]
    return data


def own_params(params: Mapping[str, Any], pair: str | None) -> dict[str, Any]:
    """A router's parameters as an operating point records them: without the ``router`` weights when they are the
    ones ``pair:`` fills in (the pair's own router), so a filled-in config still matches its operating point."""
    out = dict(params)
    program_router = out.get("router")
    if pair is not None and isinstance(program_router, str):
        mine = {str(load_pair(pair).folder / r.weights) for r in load_pair(pair).spec.routers.values()}
        if program_router in mine:
            del out["router"]
    return out


def with_pair_router(program: str, params: Mapping[str, Any], pair: Pair | str | None) -> dict[str, Any]:
    """``params`` with ``pair``'s own router weights where a learned program (r2r, citer) names none."""
    out = dict(params)
    if program in LEARNED_PROGRAMS and out.get("router") is None and pair is not None:
        out["router"] = str((load_pair(pair) if isinstance(pair, str) else pair).router_path(program))
    return out


def _router(router: dict[str, Any], pair: Pair) -> dict[str, Any]:
    program = router.get("program", "rstitch")
    params = with_pair_router(program, router.get("params") or {}, pair)
    if program == "markov" and "P" not in params:
        stats = pair.spec.routing_stats()
        if stats is None:
            raise ConfigError("router.params.P", f"markov needs P; pair {pair.name} has no routing statistics")
        params.update(P=stats.P, C=stats.C)
    return {**router, "params": params}


def _emulated(model: Any, index: int, pair: Pair) -> Any:
    if not isinstance(model, dict) or model.get("emulated") is not None:
        return model
    latency = pair.spec.latency()
    if latency is None or index >= len(pair.spec.models):
        raise ConfigError(
            f"models.{index}.emulated", f"needs latency_ms (pair {pair.name} has no latencies to fill in)"
        )
    return {**model, "emulated": {"latency_ms": latency.by_batch_size(pair.spec.models[index].name)}}
