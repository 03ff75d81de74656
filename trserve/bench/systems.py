"""The compared systems as serve configs derived from one base config (the local pair, routed).

Every system runs on the same engines and placement; only the scheduling differs:

* ``tokenrouter``: asynchronous subservers, sessions (pending state), the optimizer's thresholds as a table keyed
  by the number of active requests (so one server serves every concurrency with its own ``B*``);
* ``tokenrouter-b1``: the same with ``B = 1`` (no delayed batching);
* ``tokenrouter-bstar``: the same with the optimizer's best vector regardless of the minimum gain (so delayed
  batching is measured even where the minimum-gain rule keeps ``tokenrouter`` at ``B = 1``);
* ``tokenrouter-readmit``: optimizer thresholds, hand-off by abort + re-add with prefix caching;
* ``lockstep``: the server's ``mode: lockstep`` (``trserve.baselines.lockstep``): one driver steps one model at a
  time while the rest of the batch waits, the official R2R pattern;
* ``per-token``: the server's ``mode: per-token`` (``trserve.baselines.pertoken_dispatch``): every token is a new
  one-token request, with the whole sequence, to a plain engine of the chosen model;
* ``llm-only``: the large model alone, routing disabled;
* ``vllm-server``: not TokenRouter at all: vLLM's own OpenAI server on the large model, what a user would run
  instead (``trserve.bench.vllm_server``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trcore.errors import ConfigError
from trserve.server.defaults import operating_point, pair_operating_point
from trsim.pairs import LOCAL_PAIR

SYSTEMS = (
    "tokenrouter", "tokenrouter-b1", "tokenrouter-bstar", "tokenrouter-readmit", "lockstep", "per-token", "llm-only"
)  # fmt: skip
#: Systems served by something other than ``tokenrouter serve`` (no serve config).
EXTERNAL = ("vllm-server",)
#: Everything the bench can run.
BENCH_SYSTEMS = (*SYSTEMS, *EXTERNAL)
#: Systems of one model, run once (router "none") rather than per routing program.
SINGLE_MODEL = ("llm-only", "vllm-server")
#: Systems whose thresholds come from the throughput model's optimizer (``tokenrouter-bstar``: without min gain).
OPTIMIZED = ("tokenrouter", "tokenrouter-bstar", "tokenrouter-readmit")
#: Router parameters on the local pair: rstitch, r2r and citer at its committed operating points (``tokenrouter
#: quality``, the cheapest swept parameters reaching the target share of large-only's accuracy; share and accuracy
#: in models/local-smollm2/operating_points.json). A base config of another pair takes that pair's points.
ROUTER_PARAMS: dict[str, dict[str, Any]] = {
    "rstitch": dict(operating_point("rstitch")["params"]),
    "r2r": dict(operating_point("r2r")["params"]),
    "citer": dict(operating_point("citer")["params"]),
    #: A synthetic router (``P``, ``C``, ``seed``): its parameters come from the base config (e.g.
    #: configs/emulated-r2r-a100.yaml), which must route with ``markov``.
    "markov": {},
}
ThresholdTable = Mapping[int, Sequence[int]]


def _pair_params(base: Mapping[str, Any], router: str) -> dict[str, Any]:
    pair = base.get("pair") or LOCAL_PAIR
    if pair == LOCAL_PAIR or router == "markov":
        return ROUTER_PARAMS[router]
    return dict(pair_operating_point(pair, router)["params"])


def check_names(systems: Sequence[str], routers: Sequence[str]) -> None:
    """Unknown system or router names are a ConfigError listing the valid ones; so is an empty list where one is
    needed (every routed system runs once per router)."""
    if not systems:
        raise ConfigError("systems", f"needs at least one system; valid: {', '.join(BENCH_SYSTEMS)}")
    if not routers and any(s not in SINGLE_MODEL for s in systems):
        raise ConfigError("routers", f"the routed systems need at least one router; valid: {', '.join(ROUTER_PARAMS)}")
    for s in systems:
        if s not in BENCH_SYSTEMS:
            raise ConfigError("systems", f"unknown system {s!r}; valid: {', '.join(BENCH_SYSTEMS)}")
    for r in routers:
        if r not in ROUTER_PARAMS:
            raise ConfigError("routers", f"unknown router {r!r}; valid: {', '.join(ROUTER_PARAMS)}")


def _policy(thresholds: list[int], tables: list[dict[int, int]] | None, max_wait_ms: float | None) -> dict[str, Any]:
    return {"thresholds": thresholds, "tables": tables, "max_wait_ms": max_wait_ms}


def _tables(table: ThresholdTable, num_models: int) -> list[dict[int, int]]:
    return [{int(n): int(b[m]) for n, b in sorted(table.items())} for m in range(num_models)]


def system_config(
    base: Mapping[str, Any],
    system: str,
    router: str,
    table: ThresholdTable | None = None,
    router_params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The serve config (a dict for ``ServeConfig``) of ``system`` routed by ``router``.

    ``table`` maps a concurrency to the optimizer's thresholds (needed by the systems in ``OPTIMIZED``). The
    router's parameters are ``router_params``, else the base config's when it routes with ``router``, else
    :data:`ROUTER_PARAMS`."""
    cfg = {k: v for k, v in base.items()}
    models = list(base["models"])
    cfg["mode"], cfg["handoff"] = "routed", "session"
    if system == "llm-only":  # routes nothing: no router's parameters to look up (a pair may have none for it)
        cfg["models"] = [dict(models[-1])]
        cfg["router"] = {"program": "markov", "params": {"P": [[1.0]], "seed": 0}}
        cfg["batching"] = _policy([1], None, None)
        return cfg
    if router_params is None:  # the base config's own parameters when it routes with this program
        own = base.get("router") or {}
        router_params = own.get("params", {}) if own.get("program") == router else _pair_params(base, router)
    params = dict(router_params)
    cfg["router"] = {"program": router, "params": params}
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "tokenrouter": lambda: _policy([1] * len(models), _tables(_need(table, system), len(models)), 50.0),
        "tokenrouter-b1": lambda: _policy([1] * len(models), None, None),
        "tokenrouter-bstar": lambda: _policy([1] * len(models), _tables(_need(table, system), len(models)), 50.0),
        "tokenrouter-readmit": lambda: _policy([1] * len(models), _tables(_need(table, system), len(models)), 50.0),
        "lockstep": lambda: _policy([1] * len(models), None, None),
        "per-token": lambda: _policy([1] * len(models), None, None),
    }
    cfg["batching"] = builders[system]()
    if system == "tokenrouter-readmit":
        cfg["handoff"] = "readmit"
    if system in ("lockstep", "per-token"):
        cfg["mode"] = system
        # Admission by KV headroom is the routed front end's (refused in another mode): the baselines go without.
        cfg["server"] = {**(cfg.get("server") or {}), "kv_admission": False}
    if system == "per-token":  # its free-running engines keep vLLM's own KV accounting: no policy to pick
        cfg.pop("memory", None)
    return cfg


def check_systems_fit(base: Mapping[str, Any], systems: Sequence[str]) -> None:
    """Refuse, before any cell runs, a system that cannot run as itself on ``base``: tokenrouter-readmit on stand-in
    engines (they keep sessions), per-token with emulated KV pools (its emulated engines keep none, so it would run
    as if memory were free beside the others)."""
    if "tokenrouter-readmit" in systems and base.get("backend", "vllm") != "vllm":
        raise ConfigError("systems", f"tokenrouter-readmit re-adds requests to vLLM; backend {base.get('backend')!r} "
                          "keeps sessions, so it would measure tokenrouter again: leave it out")  # fmt: skip
    pools = [(m.get("emulated") or {}).get("kv_tokens") for m in base["models"]]
    if "per-token" in systems and base.get("backend") == "emulated" and any(pools):
        raise ConfigError("systems", "per-token keeps no KV pool on emulated engines (models[i].emulated.kv_tokens), "
                          "so it would not run with the others' memory: leave per-token out, or the pools")  # fmt: skip


def _need(table: ThresholdTable | None, system: str) -> ThresholdTable:
    if not table:
        raise ConfigError("thresholds", f"system {system!r} needs the optimizer's threshold table")
    return table
