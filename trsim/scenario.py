"""Scenario files (YAML, validated by pydantic; errors name the field): a whole simulated system in one file.

Example (every key but ``models`` and ``router.program`` is optional)::

    name: r2r-like
    seed: 0
    models:
      - {name: slm, latency: {model: constant, ms: 6.0}, threshold: 4}
      - {name: llm, latency: {profile: ../calibration/llm.json}, max_wait_ms: 50}
    router: {program: markov, P: [[0.65, 0.35], [1, 0]], C: [[1, 0], [1, 0]]}
    workload: {preset: short-reasoning, concurrency: 16}
    run: {tokens: 200000}
    baseline: tokenrouter

Relative paths (profiles, traces, lengths files) are resolved against the scenario file's folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trcore import BatchingPolicy, ConfigError
from trcore.policy import check_tables
from trsim.baselines import apply_baseline
from trsim.build import load_trace_file, with_traces
from trsim.config import PerTokenConfig, SimConfig
from trsim.kv import KVSimConfig, kv_from_specs
from trsim.latency import LatencyModel, make_latency_model
from trsim.lengths import read_length_pairs
from trsim.profile import latency_from_profile, load_profile
from trsim.routing import RouterConfig
from trsim.scenario_diurnal import DiurnalSpec, check_day, diurnal_phases
from trsim.scenario_phases import AdaptiveSpec, PhaseSpec, adaptive_config, phases_from_specs
from trsim.scenario_types import KVSpec, LatencySpec, Length, Positive
from trsim.scenario_types import Strict as _Strict
from trsim.scenario_types import length_dist as _length
from trsim.signals import SignalConfig
from trsim.workload import PRESETS, WorkloadConfig, preset
from trsim.yaml_text import load_yaml_file


class ModelSpec(_Strict):
    name: str | None = None
    latency: LatencySpec
    kv: KVSpec | None = None
    threshold: int = Field(default=1, ge=1)
    table: dict[int, int] = Field(default_factory=dict)
    max_wait_ms: float | None = Field(default=None, ge=0)
    max_batch: int = Field(default=256, ge=1)


class RouterSpec(BaseModel):
    """``program`` names a routing program; other keys are its parameters. ``trace`` takes ``file``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    program: str = "markov"
    file: str | None = None


class WorkloadSpec(_Strict):
    preset: str | None = None
    arrival: Literal["closed", "poisson"] | None = None
    concurrency: int | None = Field(default=None, ge=1)
    rate_per_s: Positive | None = None
    num_sessions: int | None = Field(default=None, ge=1)
    prompt_tokens: Length | None = None
    output_tokens: Length | None = None
    lengths_file: str | None = None
    turns: int | None = Field(default=None, ge=1)
    turn_prompt_tokens: Length | None = None
    think_time_s: float | None = Field(default=None, ge=0)
    prefix_cache: bool | None = None
    max_active: int | None = Field(default=None, ge=1)  # open loop: the server's admission limit


class RunSpec(_Strict):
    tokens: int | None = Field(default=None, ge=1)
    time_s: Positive | None = None
    warmup_tokens: int = Field(default=0, ge=0)


class PerTokenSpec(_Strict):
    client_rtt_ms: float = Field(default=1.0, ge=0)
    readmit_ms: float = Field(default=0.1, ge=0)
    prefix_match_us_per_block: float = Field(default=0.5, ge=0)
    block_size: int = Field(default=32, ge=1)
    recompute_us_per_token: float | list[float] | None = None


class SignalSpec(_Strict):
    log_entropy_mean: float = -1.5
    phi: float = Field(default=0.9, gt=-1, lt=1)
    sigma: float = Field(default=0.5, ge=0)


class Scenario(_Strict):
    name: str = "scenario"
    seed: int = 0
    models: list[ModelSpec] = Field(min_length=1)
    router: RouterSpec = Field(default_factory=RouterSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    run: RunSpec = Field(default_factory=RunSpec)
    transfer_delay_ms: float = Field(default=0.0, ge=0)
    entry_model: int = Field(default=0, ge=0)
    baseline: str = "tokenrouter"
    #: The spill policy when the models have ``kv`` sections: cost, lru or admission-limit.
    spill: str = "cost"
    per_token: PerTokenSpec | None = None
    signals: SignalSpec = Field(default_factory=SignalSpec)
    #: A time-varying workload: spans overriding router P/C, concurrency and output lengths; the run ends with them.
    phases: list[PhaseSpec] = Field(default_factory=list)
    #: The adaptive controller's knobs (used with ``--thresholds adaptive``).
    adaptive: AdaptiveSpec = Field(default_factory=AdaptiveSpec)
    #: A smooth day instead of ``phases`` (``trsim.scenario_diurnal``): cosine concurrency and routing, in phases.
    diurnal: DiurnalSpec | None = None

    @model_validator(mode="after")
    def _phases_or_diurnal(self) -> Scenario:
        if self.phases and self.diurnal is not None:
            raise ValueError("give phases or diurnal, not both")
        return self


def scenario_phases(scenario: Scenario) -> list[PhaseSpec]:
    """The scenario's phases: its ``phases``, or those its ``diurnal`` section expands to."""
    if scenario.diurnal is None:
        return scenario.phases
    check_day(scenario.diurnal, len(scenario.models), scenario.router.program)
    return diurnal_phases(scenario.diurnal)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    data = load_yaml_file(path, "scenario")
    if not isinstance(data, dict):
        raise ConfigError("scenario", f"{path}: must be a mapping with at least 'models'")
    return Scenario.model_validate(data)


def scenario_config(scenario: Scenario, base_dir: str | Path = ".", *, adaptive: bool = False) -> SimConfig:
    """The ``SimConfig`` a scenario describes (baseline applied); ``adaptive``: thresholds tuned online by the
    controller with the scenario's ``adaptive`` knobs."""
    base = Path(base_dir)
    n = len(scenario.models)
    latency = tuple(_latency(m.latency, base, f"models[{i}].latency") for i, m in enumerate(scenario.models))
    config = SimConfig(
        latency=latency,
        policies=_policies(scenario.models),
        router=_router(scenario.router),
        workload=_workload(scenario.workload, base),
        signals=SignalConfig(**scenario.signals.model_dump()),
        transfer_delay_s=scenario.transfer_delay_ms / 1000,
        entry_model=scenario.entry_model,
        seed=scenario.seed,
        per_token_costs=_per_token(scenario.per_token),
        model_names=tuple(m.name or f"model{i}" for i, m in enumerate(scenario.models)),
        kv=_kv(scenario, latency, base),
        phases=phases_from_specs(scenario_phases(scenario), scenario.router.program),
        adaptive=adaptive_config(scenario.adaptive) if adaptive else None,
    )
    if scenario.router.program == "trace":
        if not scenario.router.file:
            raise ConfigError("router.file", "trace replay needs a trace file (JSONL)")
        config = with_traces(config, load_trace_file(base / scenario.router.file, n))
    if adaptive and scenario.baseline != "tokenrouter":
        raise ConfigError(
            "baseline", f"adaptive tunes TokenRouter's thresholds; the {scenario.baseline} baseline has its own"
        )
    setting = [k for k, p in enumerate(config.phases) if p.concurrency is not None]
    if config.workload.arrival != "closed" and setting:  # named as the file says: a day or a phase
        day = scenario.diurnal is not None
        where, what = ("diurnal.concurrency", "the day") if day else (f"phases[{setting[0]}].concurrency", "a phase")
        raise ConfigError(where, f"a {config.workload.arrival} workload has no concurrency for {what} to set")
    return apply_baseline(config, scenario.baseline)


def _kv(scenario: Scenario, latency: Sequence[LatencyModel], base: Path) -> KVSimConfig | None:
    profiles = [load_profile(base / m.latency.profile) if m.latency.profile else None for m in scenario.models]
    specs = [m.kv for m in scenario.models]
    if "spill" in scenario.model_fields_set and all(spec is None for spec in specs):
        raise ConfigError("spill", "chooses what a full KV cache gives up; give the models a kv section")
    return kv_from_specs(specs, list(zip(latency, profiles, strict=True)), scenario.spill)


def _latency(spec: LatencySpec, base: Path, where: str) -> LatencyModel:
    if spec.model is not None and spec.model.split(":")[0] == "roofline":
        return _roofline(spec, base, where)
    if spec.profile is not None:
        return latency_from_profile(load_profile(base / spec.profile), spec.model)
    name = spec.model or "constant"
    ms = spec.ms
    if name == "constant":
        if not isinstance(ms, float | int):
            raise ConfigError(f"{where}.ms", "a constant latency needs one number of milliseconds")
        return make_latency_model(name, {"latency_s": ms / 1000})
    if name == "table":
        if not isinstance(ms, list) or spec.batch_sizes is None:
            raise ConfigError(where, "a table needs batch_sizes and ms lists of equal length")
        return make_latency_model(name, {"batch_sizes": spec.batch_sizes, "latency_s": [v / 1000 for v in ms]})
    if spec.coefficients is None:
        raise ConfigError(f"{where}.coefficients", f"latency model {name!r} needs its coefficients (seconds)")
    return make_latency_model(name, spec.coefficients)


def _roofline(spec: LatencySpec, base: Path, where: str) -> LatencyModel:
    from trsim.roofline import RooflineModel, parse_roofline_spec
    from trsim.roofline_fit import fit_roofline_to_profiles

    if spec.model and spec.model != "roofline":
        model = parse_roofline_spec(spec.model, **spec.params)
    elif spec.hardware is None or spec.shape is None:
        raise ConfigError(where, "a roofline needs hardware and shape (or model: roofline:<hardware>:<shape>:tp<k>)")
    else:
        model = RooflineModel(spec.hardware, spec.shape, spec.tp, spec.dtype, **spec.params)
    if spec.profile is None:
        return model
    return model.with_params(fit_roofline_to_profiles([load_profile(base / spec.profile)], [model]).params)


def _policies(specs: Sequence[ModelSpec]) -> tuple[BatchingPolicy, ...]:
    # Each model knows its peers' slack, so thresholds stay deadlock-free as requests finish; tables are checked.
    if any(m.table for m in specs):
        check_tables(
            [m.threshold for m in specs], [m.table for m in specs], "models.table", [m.max_batch for m in specs]
        )
    total = sum(m.threshold - 1 for m in specs)
    return tuple(_policy(m, total - (m.threshold - 1)) for m in specs)


def _policy(spec: ModelSpec, peer_slack: int) -> BatchingPolicy:
    max_wait = spec.max_wait_ms / 1000 if spec.max_wait_ms is not None else None
    return BatchingPolicy(spec.threshold, spec.table, max_wait, spec.max_batch, peer_slack)


def _router(spec: RouterSpec) -> RouterConfig:
    params: dict[str, Any] = dict(spec.model_extra or {})
    return RouterConfig(spec.program, params)


def _workload(spec: WorkloadSpec, base: Path) -> WorkloadConfig:
    if spec.preset is not None and spec.preset not in PRESETS:
        raise ConfigError("workload.preset", f"unknown preset {spec.preset!r}; valid: {', '.join(sorted(PRESETS))}")
    config = preset(spec.preset) if spec.preset else WorkloadConfig()
    overrides: dict[str, Any] = {
        "arrival": spec.arrival,
        "concurrency": spec.concurrency,
        "rate_per_s": spec.rate_per_s,
        "num_sessions": spec.num_sessions,
        "prompt_tokens": _length(spec.prompt_tokens, "workload.prompt_tokens"),
        "output_tokens": _length(spec.output_tokens, "workload.output_tokens"),
        "turns": spec.turns,
        "turn_prompt_tokens": _length(spec.turn_prompt_tokens, "workload.turn_prompt_tokens"),
        "think_time_s": spec.think_time_s,
        "prefix_cache": spec.prefix_cache,
        "max_active": spec.max_active,
        "pairs": read_length_pairs(base / spec.lengths_file) if spec.lengths_file else None,
    }
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    for name in ("prompt_tokens", "output_tokens"):
        if spec.lengths_file and getattr(spec, name) is not None:  # the pairs set both lengths of every request
            raise ConfigError(f"workload.{name}", "the length pairs (lengths_file) set every request's; drop one")
    if config.arrival == "closed" and spec.rate_per_s is not None:
        raise ConfigError("workload.rate_per_s", "paces an open loop (arrival: poisson); a closed loop has none")
    if config.arrival == "poisson" and spec.rate_per_s is None:
        raise ConfigError("workload.rate_per_s", "an open loop (arrival: poisson) needs its rate in requests/s")
    if config.arrival == "poisson" and spec.concurrency is not None:
        raise ConfigError("workload.concurrency", "sets a closed loop; an open loop's rate sets its load")
    if config.arrival == "poisson" and config.turns == 1 and spec.think_time_s is not None:
        raise ConfigError("workload.think_time_s", "paces a session's next turn; one-turn sessions arriving at a "
                          "rate have none (give turns > 1, or drop it)")  # fmt: skip
    return config


def _per_second(us: float | list[float] | None) -> float | tuple[float, ...] | None:
    if us is None or isinstance(us, int | float):
        return None if us is None else us / 1e6
    return tuple(x / 1e6 for x in us)


def _per_token(spec: PerTokenSpec | None) -> PerTokenConfig | None:
    if spec is None:
        return None
    return PerTokenConfig(
        client_rtt_s=spec.client_rtt_ms / 1000,
        readmit_s=spec.readmit_ms / 1000,
        prefix_match_s_per_block=spec.prefix_match_us_per_block / 1e6,
        block_size=spec.block_size,
        recompute_s_per_token=_per_second(spec.recompute_us_per_token),
    )
