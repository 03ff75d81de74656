"""The batching thresholds of a run: given in the config, defaulted, or ``auto`` from the throughput model.

``auto`` needs two inputs measured on this machine: a calibration profile per model (step latency as a function
of batch size and context; ``tokenrouter calibrate`` writes them under
``calibration/profiles/<hardware tag>/<model>.json``) and routing statistics (P, C: estimated from recorded
routing traces, e.g. those ``tokenrouter crossval`` writes, or the routing program's own ``P``/``C`` parameters).
Before the optimizer, a drift probe (injected by the CLI: the probe runs engines, which is a tool's job) times
each engine against its profile; ``batching.auto.drift`` says whether the ratios scale the latency tables, stop
the start beyond ``drift_tolerance``, are only reported, or whether no probe runs (``trserve.server.drift``).
The optimizer's choice is logged at start-up with its inputs, the drift ratios and what was done with them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trcore.routing_stats import estimate_routing_stats
from trcore.throughput import ThroughputModel
from trcore.traces import trace_from_dict
from trserve.config import ServeConfig
from trserve.engine.emulated import EmulatedLatency
from trserve.hardware import hardware_tag, profile_path, read_machine_profile
from trserve.server.drift import DriftProbe, assess
from trsim.profile import latency_from_profile

log = logging.getLogger(__name__)
Report = Callable[[str], None]

#: Context length per request at which profile latencies are evaluated (a typical short chat turn).
TYPICAL_CONTEXT = 256
#: Time grid of the throughput model for ``auto``: this fraction of the shortest step (finer grids grow the chain
#: without changing the optimum; at 1/10 a 16-request optimization takes seconds).
QUANTUM_FRACTION = 0.1


def resolve_thresholds(
    cfg: ServeConfig, model_paths: Sequence[str] = (), report: Report | None = None, probe: DriftProbe | None = None
) -> list[int]:
    """One threshold per model (default 1: launch as soon as anything is ready); ``auto`` tells ``report`` (default:
    this module's log) what it chose and from which inputs, after the drift ``probe`` (see :func:`drift_factors`)."""
    given = cfg.batching.thresholds
    if given is None or cfg.mode != "routed":
        return [1] * cfg.num_models
    if given == "auto":
        return auto_thresholds(cfg, report, probe)
    field = "batching.thresholds"
    if given == "adaptive":  # the front end's controller tunes them from here (trserve.frontend.tuner)
        if cfg.batching.tables is not None:  # its vector, sent to every worker as it connects, drops them
            raise ConfigError("batching.tables", "thresholds: adaptive tunes one vector for every active count and "
                              "replaces tables; give thresholds as a list to use tables")  # fmt: skip
        initial = cfg.batching.adaptive.initial  # an empty list is a vector of the wrong length, not the default
        field, given = "batching.adaptive.initial", [1] * cfg.num_models if initial is None else initial
        if len(given) != cfg.num_models:
            raise ConfigError(field, f"needs one threshold per model ({cfg.num_models})")
    for i, (b, m) in enumerate(zip(given, cfg.models, strict=True)):
        cap, why = m.max_num_seqs, "max_num_seqs"
        if cfg.batching.max_batch is not None and cfg.batching.max_batch < cap:
            cap, why = cfg.batching.max_batch, "batching.max_batch"
        if not 1 <= b <= cap:
            raise ConfigError(f"{field}.{i}", f"must be within 1..{cap} ({why}), got {b}")
    return list(given)


def load_profile(cfg: ServeConfig, model: int) -> Any:
    """Model ``model``'s calibration profile (``trsim.profile.LatencyProfile``), or a ConfigError that says how
    to make one."""

    path = profile_path(cfg, model)
    if not path.is_file():
        raise ConfigError(
            "batching.thresholds",
            f"auto needs a calibration profile of model {cfg.models[model].name!r} on this machine "
            f"({hardware_tag()}), but {path} does not exist; run `tokenrouter calibrate` first, or give the "
            "thresholds as a list",
        )
    return read_machine_profile(path)


def profile_latency(profile: Any, batch_size: int, context: int = TYPICAL_CONTEXT) -> float:
    """Decode-step latency (s) at ``batch_size``, every request holding ``context`` tokens, from the profile's
    preferred fit."""

    return float(latency_from_profile(profile).predict(batch_size, batch_size * context, 0))


def routing_matrices(cfg: ServeConfig) -> tuple[list[list[float]], list[list[float]], str]:
    """P, C and where they came from: recorded routing traces (JSONL, ``trcore.traces`` format) or the routing
    program's ``P``/``C`` parameters."""
    traces = cfg.batching.auto.routing_traces
    if traces:
        path = Path(traces)
        if not path.is_file():
            raise ConfigError("batching.auto.routing_traces", f"{path} does not exist")
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        if not lines:
            raise ConfigError("batching.auto.routing_traces", f"{path} holds no traces")
        parsed = [trace_from_dict(json.loads(line), cfg.num_models, where=f"{path.name}:{k + 1}") for k, line in
                  enumerate(lines)]  # fmt: skip
        # Closed loop: a finished request is replaced by a new one at the entry model.
        stats = estimate_routing_stats(parsed, cfg.num_models, entry_model=cfg.entry_model)
        if stats.unvisited:
            raise ConfigError("batching.auto.routing_traces", f"no step on model(s) {list(stats.unvisited)}")
        return [list(r) for r in stats.P], [list(r) for r in stats.C], f"{len(parsed)} traces in {path}"
    params = cfg.router.params
    if "P" in params:
        n = cfg.num_models
        return params["P"], params.get("C") or [[1.0] * n for _ in range(n)], "router.params"
    raise ConfigError(
        "batching.auto.routing_traces",
        "auto thresholds need routing statistics: record traces of this routing program (JSONL, e.g. "
        "`tokenrouter crossval` writes them) and name the file here",
    )


def drift_factors(cfg: ServeConfig, models: Sequence[Any], probe: DriftProbe | None) -> tuple[list[float], str]:
    """Per model the factor its profile latencies are multiplied by, and what was done, in words: the ``probe``'s
    ratios under ``batching.auto.drift`` (raises for ``stop`` beyond the tolerance); 1.0 each when the mode is
    ``skip`` or no probe was given (an entry point that cannot start engines: the message says so)."""
    auto, names = cfg.batching.auto, [m.name for m in cfg.models]
    ones = [1.0] * cfg.num_models
    if auto.drift == "skip":
        return ones, "drift probe skipped (batching.auto.drift: skip)"
    if probe is None:
        return ones, "drift probe not run (this entry point has none; `tokenrouter serve` runs it)"
    remedy = "set batching.auto.drift: scale"
    drift = assess(probe(cfg, models), auto.drift, auto.drift_tolerance, names, remedy)
    return drift.factors, f"drift probe ({auto.drift}): {drift.summary(names)}"


def auto_inputs(
    cfg: ServeConfig, probe: DriftProbe | None = None
) -> tuple[list[list[float]], list[list[float]], str, list[list[float]], str]:
    """The optimizer's inputs: P, C, where they came from, latency tables per model (batch 1..cap, the profiles'
    decode latency at :data:`TYPICAL_CONTEXT` times the drift factor; emulated engines' own ``latency_ms``, with no
    profile or probe) and the drift outcome in words."""
    n = cfg.batching.auto.concurrency
    caps = [min(cfg.batching.max_batch or m.max_num_seqs, m.max_num_seqs, n) for m in cfg.models]
    if _declared(cfg):  # the engines step as the config says; a profile of that name is another model's
        P, C, source = routing_matrices(cfg)
        tables = [EmulatedLatency.from_config(m.emulated).table(cap, TYPICAL_CONTEXT)
                  for m, cap in zip(cfg.models, caps, strict=True) if m.emulated is not None]  # fmt: skip
        return P, C, source, tables, "drift probe not needed (emulated: the engines step exactly as configured)"
    models = [latency_from_profile(load_profile(cfg, m)) for m in range(cfg.num_models)]
    P, C, source = routing_matrices(cfg)
    factors, drift = drift_factors(cfg, models, probe)
    latency = [
        [f * float(model.predict(b, b * TYPICAL_CONTEXT, 0)) for b in range(1, cap + 1)]
        for model, f, cap in zip(models, factors, caps, strict=True)
    ]
    return P, C, source, latency, drift


def auto_thresholds(cfg: ServeConfig, report: Report | None = None, probe: DriftProbe | None = None) -> list[int]:
    """B* = argmax of the throughput model at ``batching.auto.concurrency``; reported with its inputs."""
    P, C, source, latency, drift = auto_inputs(cfg, probe)
    n = cfg.batching.auto.concurrency
    caps = [len(table) for table in latency]
    quantum_s = QUANTUM_FRACTION * min(min(table) for table in latency)
    best = ThroughputModel(P, C, latency, quantum_s=quantum_s, max_batch=caps).optimize(
        n, min_gain=cfg.batching.auto.min_gain
    )
    message = (
        f"thresholds auto: {list(best.thresholds)} (throughput model: {best.throughput_tok_s:.1f} tok/s at "
        f"{n} concurrent requests, best of {len(best.candidates)}, min gain {cfg.batching.auto.min_gain:.0%}; "
        f"P={_fmt(P)} C={_fmt(C)} from {source}; "
        f"latency at context {TYPICAL_CONTEXT} from {_latency_source(cfg)}; {drift})"
    )
    (report or log.info)(message)
    return [int(b) for b in best.thresholds]


def _declared(cfg: ServeConfig) -> bool:
    """Whether every model is an emulated engine given its step times (``emulated.latency_ms``). One emulating a
    ``profile`` stands in for a real engine (tests of the drift probe): it is read and probed like one."""
    return cfg.backend == "emulated" and all(m.emulated and m.emulated.latency_ms is not None for m in cfg.models)


def _latency_source(cfg: ServeConfig) -> str:
    if _declared(cfg):
        return "the emulated engines' latency_ms (the config's)"
    return str([str(profile_path(cfg, m)) for m in range(cfg.num_models)])


def _fmt(matrix: Sequence[Sequence[float]]) -> str:
    return "[" + ", ".join("[" + ", ".join(f"{x:.3g}" for x in row) + "]" for row in matrix) + "]"
