"""From raw calibration measurements to a latency profile (docs/profile-schema.md): fits of the simulator's latency
models with their MAPE, the spread of repeated cells, and the hand-off costs (pure: no engine)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from trcore.errors import ConfigError
from trsim.fit import LatencyFit, LatencySample, fit_latency_model, mape
from trsim.profile import FitRecord, LatencyProfile, MachineInfo, SampleRecord

#: Which samples each latency model is fitted to and scored on. Models without an extend term would fold prefill
#: and hand-off appends into their per-batch figures, so they see decode steps only; ``quadratic`` sees all.
FIT_SCOPES = {"constant": "decode", "table": "decode", "linear": "decode", "quadratic": "all"}

METHOD = (
    "tokenrouter calibrate: the model runs alone in its own process pinned to its serve placement, on the engine "
    "the server uses (trserve.StepEngine: in-process vLLM EngineCore, one token per request per step, entropy hook "
    "on). latency_s is the wall time of one StepEngine.step (the server loop's step), cpu_s the process CPU time "
    "beside it. Decode cells: distinct random prompts prefilled once per context level (untimed), then rotating "
    "subsets of each batch size stepped one token (the context drifts by a few tokens; samples record the exact "
    "sum). Extend cells: requests holding a prefix-cached base prompt (or none: a fresh prompt) fed the decode token "
    "plus `extend` appended tokens. Hand-off: at each context, a kept session (pending resume) vs abort-and-readmit "
    "with prefix caching on the same engine: one decode step, then a return step bringing peer tokens. Cells are "
    "interleaved round by round; warm-up rounds are not recorded."
)


def samples_of(raw: Sequence[dict[str, Any]]) -> list[LatencySample]:
    return [LatencySample(s["batch_size"], s["context_tokens"], s["extend_tokens"], s["latency_s"]) for s in raw]


def fit_models(samples: Sequence[LatencySample]) -> tuple[list[LatencyFit], dict[str, Any]]:
    """Fit every model of FIT_SCOPES on its samples; returns the fits (preferred first: the lowest MAPE among
    the fits that cover every sample, then the rest by MAPE) and per-model notes (scope, counts, decode MAPE)."""
    decode = [s for s in samples if s.extend_tokens == 0]
    fits: list[tuple[LatencyFit, bool]] = []
    notes: dict[str, Any] = {}
    for name, scope in FIT_SCOPES.items():
        subset = decode if scope == "decode" else list(samples)
        if not subset:
            notes[name] = {"skipped": f"no {scope} samples"}
            continue
        try:
            fit = fit_latency_model(name, subset)
        except ConfigError as exc:
            notes[name] = {"skipped": str(exc)}
            continue
        covers_all = len(subset) == len(samples)
        fits.append((fit, covers_all))
        notes[name] = {"samples": "all" if covers_all else "decode", "num_samples": len(subset), "mape": fit.mape}
        if decode:
            notes[name]["decode_mape"] = mape(fit.build(), decode)
    ranked = sorted(fits, key=lambda f: (not f[1], f[0].mape or 0.0))
    preferred = ranked[:1]
    rest = sorted(ranked[1:], key=lambda f: f[0].mape or 0.0)
    return [f for f, _ in preferred + rest], notes


def cell_summaries(raw: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (kind, batch size, nominal context, extend): repeats, median / min / max wall seconds, the
    spread ``(max - min) / median`` and the median CPU seconds."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in raw:
        cell = s["cell"]
        groups.setdefault((s["kind"], cell["batch_size"], cell["context"], cell["extend"]), []).append(s)
    out = []
    for (kind, b, ctx, ext), rows in groups.items():
        out.append({"kind": kind, "batch_size": b, "context": ctx, "extend": ext, **_stats(rows)})
    return out


def _stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    wall = [r["latency_s"] for r in rows]
    median = statistics.median(wall)
    return {
        "n": len(wall),
        "median_s": median,
        "min_s": min(wall),
        "max_s": max(wall),
        "spread": (max(wall) - min(wall)) / median,
        "cpu_median_s": statistics.median(r["cpu_s"] for r in rows),
    }


def spread_summary(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How repeatable the cells were: median and worst spread, and the median wall/CPU ratio (above 1: the step
    waited for a core, i.e. other work shared it)."""
    if not cells:
        return {}
    worst = max(cells, key=lambda c: c["spread"])
    return {
        "median_spread": statistics.median(c["spread"] for c in cells),
        "max_spread": worst["spread"],
        "worst_cell": {k: worst[k] for k in ("kind", "batch_size", "context", "extend", "n")},
        "median_wall_over_cpu": statistics.median(c["median_s"] / max(c["cpu_median_s"], 1e-9) for c in cells),
    }


def handoff_summary(raw: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hand-off context: the decode and return steps of each strategy, and readmit / session ratios."""
    by_context: dict[int, dict[str, Any]] = {}
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for r in raw:
        groups.setdefault((r["context"], r["mode"], r["step"]), []).append(r)
        by_context.setdefault(r["context"], {"context": r["context"], "peer_tokens": r["peer_tokens"]})
    for (ctx, mode, step), rows in groups.items():
        by_context[ctx][f"{mode}_{step}"] = {**_stats(rows), "computed_tokens": rows[0]["computed_tokens"]}
    for row in by_context.values():
        for step in ("decode", "return"):
            if f"session_{step}" in row and f"readmit_{step}" in row:
                ratio = row[f"readmit_{step}"]["median_s"] / row[f"session_{step}"]["median_s"]
                row[f"{step}_ratio_readmit_over_session"] = ratio
    return list(by_context.values())


def backend_line(engine: dict[str, Any], machine: dict[str, Any]) -> str:
    mode = "eager" if engine["enforce_eager"] else "graphs"
    caching = "prefix caching" if engine["enable_prefix_caching"] else "no prefix caching"
    return (
        f"{machine.get('vllm_package', 'vllm')} {machine.get('vllm')}, {engine['dtype']}, {mode}, "
        f"KV block {engine['block_size']}, {caching}, {engine['handoff']} hand-off"
    )


def describe_machine(machine: dict[str, Any]) -> str:
    cpus = machine["cpus"]
    where = machine.get("accelerator") or f"{len(cpus)} of {machine['cpu_count']} cores ({cpus})"
    return f"{machine['cpu_model']}, {machine['cpu_count']}-core machine; engine on {where}"


def build_profile(llm: str, raw: dict[str, Any], grid: dict[str, Any], command: str, created: str) -> LatencyProfile:
    """The profile of one model from a worker's raw result (see :mod:`trserve.calibrate.worker`)."""
    samples = samples_of(raw["samples"])
    fits, notes = fit_models(samples)
    records = [FitRecord(model=f.model, coefficients=f.coefficients, mape=f.mape) for f in fits]
    cells = cell_summaries(raw["samples"])
    machine = {**raw["machine"], "load_average": raw["load_average"]}
    machine = {k: v for k, v in machine.items() if v is not None}
    calibration = {
        "tool": "tokenrouter calibrate",
        "command": command,
        "method": METHOD,
        "grid": grid,
        "engine": raw["engine"],
        "fits": notes,
        "spread": spread_summary(cells),
        "cells": cells,
        "skipped_cells": raw["skipped"],
        "handoff": handoff_summary(raw["handoff"]),
        "steps": raw["steps"],
        "engine_start_s": raw["engine_start_s"],
        "duration_s": raw["duration_s"],
    }
    return LatencyProfile(
        llm=llm,
        backend=backend_line(raw["engine"], raw["machine"]),
        created=created,
        machine=MachineInfo(description=describe_machine(raw["machine"]), **machine),
        samples=[SampleRecord(**vars(s)) for s in samples],
        fit=records[0] if records else None,
        other_fits=records[1:],
        calibration=calibration,
    )
