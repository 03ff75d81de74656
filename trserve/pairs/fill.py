"""A serve config's ``pair:``: what the named model pair fills into the config before it is validated.

With ``pair: <name>`` (or ``--pair``), a config may leave out what the pair already says: a learned router's
weights (``router.params.router`` for ``r2r`` / ``citer``: the pair's own), the ``markov`` program's routing
statistics (P and C: the pair's first ``routing`` entry) and, with ``backend: emulated``, each model's step time
(``emulated.latency_ms``: the pair's first ``latencies`` entry), matched to the config's models by name where they
carry the pair's names, else by place. Anything the config gives itself wins. Whether
the artifacts then fit the served models is checked at start-up (:mod:`trserve.pairs.check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trcore.errors import ConfigError
from trsim.pair_schema import ROLES
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
    models = data.get("models") if isinstance(data.get("models"), list) else []
    order = pair_order(models, pair)
    router = data.get("router") or {}
    if isinstance(router, dict) and isinstance(router.get("params") or {}, dict):  # else: validation names it
        data["router"] = _router(dict(router), pair, order)
    if data.get("backend") == "emulated" and models:
        data["models"] = [_emulated(m, i, k, pair) for i, (m, k) in enumerate(zip(models, order, strict=True))]
    return data


def pair_order(models: list[Any], pair: Pair) -> list[int]:
    """The pair's model index of each config model: by name where the config names the pair's models (in any
    order, or some of them), else by place."""
    names = [m.get("name") if isinstance(m, dict) else None for m in models]
    roles = [m.name for m in pair.spec.models]
    if names and len(set(names)) == len(names) and all(n in roles for n in names):
        return [roles.index(n) for n in names]
    return list(range(len(models)))


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


def _router(router: dict[str, Any], pair: Pair, order: list[int]) -> dict[str, Any]:
    program = router.get("program", "rstitch")
    params = with_pair_router(program, router.get("params") or {}, pair)
    if program == "markov" and "P" not in params:
        stats = pair.spec.routing_stats()
        if stats is None:
            raise ConfigError("router.params.P", f"markov needs P; pair {pair.name} has no routing statistics")
        if sorted(order) != list(range(len(stats.P))):  # not every model of the pair, once: no P to reorder
            raise ConfigError("router.params.P", f"markov needs P; the pair's is for its models {ROLES}")
        params.update(P=_reordered(stats.P, order), C=_reordered(stats.C, order))
    return {**router, "params": params}


def _reordered(matrix: list[list[float]], order: list[int]) -> list[list[float]]:
    """``matrix`` (rows and columns in the pair's model order) in the config's model order."""
    return [[matrix[a][b] for b in order] for a in order]


def _emulated(model: Any, index: int, role: int, pair: Pair) -> Any:
    """Config model ``index``, the pair's model ``role``, with the pair's step time where it gives none: no
    ``emulated`` section, or one with neither ``latency_ms`` nor ``profile`` (its other keys, e.g. ``kv_tokens``,
    kept)."""
    if not isinstance(model, dict):
        return model
    emulated = {} if model.get("emulated") is None else model["emulated"]
    if not isinstance(emulated, dict) or any(emulated.get(k) is not None for k in ("latency_ms", "profile")):
        return model  # its own step time, or not a section at all (validation names it)
    latency = pair.spec.latency()
    if latency is None or role >= len(pair.spec.models):
        raise ConfigError(
            f"models.{index}.emulated", f"needs latency_ms (pair {pair.name} has no latencies to fill in)"
        )
    return {**model, "emulated": {**emulated, "latency_ms": latency.by_batch_size(pair.spec.models[role].name)}}
