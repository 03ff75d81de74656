"""One model's section of the serve config (``models[i]``): its checkpoint and engine limits, its replicas, where
they run (:class:`PlacementConfig`) and, with ``backend: emulated``, its step time (:class:`EmulatedConfig`); and
the checks across the models of one config (:func:`check_models`); and ``cluster:``, the Ray cluster the models'
worker processes may run on (:class:`ClusterConfig`, :func:`check_cluster`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The largest token count a model's settings may give: the workers' messages (Ready, step reports, a request's
#: ``max_tokens``) carry it as a 64-bit integer (msgpack), so a larger one crashed a worker at start-up.
MAX_TOKEN_COUNT = 2**63 - 1


class StrictSection(BaseModel):
    """A section of the serve config: an unknown field is an error, a value of another type is one too (``strict``:
    ``true`` or ``"8"`` where a number belongs is refused, not converted), and the values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class PlacementConfig(StrictSection):
    """Where one model runs. On CPU: ``cpus`` (core ids; None = an even share of this process's cores).
    On CUDA: ``gpus`` (device ids, ``tensor_parallel_size`` per replica). A model with replicas splits them in
    order: replica ``r`` gets the ``r``-th equal share."""

    cpus: list[int] | None = None
    gpus: list[int] | None = None
    tensor_parallel_size: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _gpus_distinct(self) -> PlacementConfig:
        if self.gpus is not None and len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"gpus {self.gpus} name a device twice")
        return self


class EmulatedConfig(StrictSection):
    """``backend: emulated``: one model's step time. Exactly one of ``latency_ms`` (a constant, or a list by batch
    size from 1 whose last value holds beyond its end) and ``profile`` (a calibration profile JSON: its fit, with
    context and extend terms); ``jitter`` draws each step's time from the profile's measured spread. ``overlap``:
    the subserver sends a step's report while the next step runs, as a GPU engine's asynchronous output processing
    lets it (false: the report goes before the next step starts, as with a synchronous engine). ``kv_tokens``: the
    engine's KV block pool in tokens (blocks of the model's ``block_size``, at most ``max_num_seqs`` requests
    holding KV); a step that would overcommit it fails, and the core's KV accounting plans within it. None: no
    pool (memory is free, as before)."""

    latency_ms: float | list[float] | None = None
    profile: str | None = None
    jitter: bool = False
    overlap: bool = True
    kv_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_COUNT)

    @model_validator(mode="after")
    def _one_source(self) -> EmulatedConfig:
        if (self.latency_ms is None) == (self.profile is None):
            raise ValueError("emulated needs exactly one of latency_ms and profile")
        values = [self.latency_ms] if isinstance(self.latency_ms, float | int) else self.latency_ms or []
        if self.latency_ms is not None and (not values or any(not v > 0 for v in values)):
            raise ValueError(f"emulated.latency_ms must be positive (a number or a non-empty list), got {values}")
        if self.profile is not None and not Path(self.profile).expanduser().is_file():
            raise ValueError(f"emulated.profile: no such file {self.profile!r}")
        if self.jitter and self.profile is None:
            raise ValueError("emulated.jitter needs a profile (it draws from the profile's measured spread)")
        return self


class ModelConfig(StrictSection):
    """One model of the routed ensemble. ``path`` is an HF checkpoint directory, or ``prepared:NAME`` for a
    checkpoint made by ``tokenrouter models prepare`` (optional with ``backend: emulated``, which needs
    ``emulated`` instead)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    path: str | None = None
    emulated: EmulatedConfig | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_model_len: int = Field(2048, ge=16, le=MAX_TOKEN_COUNT)
    block_size: int = Field(32, ge=1, le=MAX_TOKEN_COUNT)
    kv_cache_gib: float = Field(1.0, gt=0)
    max_num_seqs: int = Field(64, ge=1)
    #: Copies of this model, each its own subserver process, engine and KV cache (``mode: routed`` only); a request
    #: is pinned to one of them (the least loaded when it is admitted) for its whole life.
    replicas: int = Field(1, ge=1, le=64)
    placement: PlacementConfig = PlacementConfig()

    @model_validator(mode="after")
    def _devices_per_replica(self) -> ModelConfig:
        place, k = self.placement, self.replicas
        if place.gpus is not None and len(place.gpus) != place.tensor_parallel_size * k:
            raise ValueError(
                f"placement.gpus: {len(place.gpus)} given; {k} replica(s) x tensor_parallel_size "
                f"{place.tensor_parallel_size} need {place.tensor_parallel_size * k}"
            )
        if place.cpus is not None and len(place.cpus) < k:
            raise ValueError(f"placement.cpus: {len(place.cpus)} core(s) for {k} replicas; each replica needs its own")
        kv_tokens = self.emulated.kv_tokens if self.emulated is not None else None
        if kv_tokens is not None and kv_tokens < self.block_size:
            raise ValueError(f"emulated.kv_tokens: {kv_tokens} tokens hold no whole block of {self.block_size}")
        return self

    def process_name(self, replica: int) -> str:
        """The name of the process running replica ``replica`` (logs, metrics): the model's name when it has one
        replica, else ``NAME-rR``."""
        return self.name if self.replicas == 1 else f"{self.name}-r{replica}"


def check_models(mode: str, backend: str, models: list[ModelConfig]) -> None:
    """The models of one config agree with each other and with its ``mode`` and ``backend`` (ValueError naming the
    field otherwise)."""
    _check_disjoint_cpus(models)
    _check_backend_fields(backend, models)
    _check_replicas(mode, models)


def _check_disjoint_cpus(models: list[ModelConfig]) -> None:
    seen: dict[int, str] = {}
    for m in models:
        for cpu in m.placement.cpus or ():
            if cpu in seen:
                raise ValueError(f"cpu {cpu} is given to both {seen[cpu]!r} and {m.name!r}; core sets must be disjoint")
            seen[cpu] = m.name


def _check_replicas(mode: str, models: list[ModelConfig]) -> None:
    for i, m in enumerate(models):
        if m.replicas > 1 and mode != "routed":
            raise ValueError(f"models.{i}.replicas: {m.replicas} replicas need mode: routed (mode is {mode})")
    names = [m.process_name(r) for m in models for r in range(m.replicas)]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"models: replica process names {clash} clash with a model's name; rename that model")


def _check_backend_fields(backend: str, models: list[ModelConfig]) -> None:
    for i, m in enumerate(models):
        if backend == "emulated" and m.emulated is None:
            raise ValueError(f"models.{i}.emulated is required with backend: emulated (e.g. {{latency_ms: 6.0}})")
        if backend != "emulated" and m.emulated is not None:
            raise ValueError(f"models.{i}.emulated is only read with backend: emulated (backend is {backend})")
        if backend != "emulated" and m.path is None:
            raise ValueError(f"models.{i}.path is required with backend: {backend}")


def check_memory(mode: str, backend: str, models: list[ModelConfig], kv_admission: bool, policy: str) -> None:
    """KV settings that would do nothing, or run as if memory were free, are refused (ValueError naming the field)."""
    if mode == "per-token" and any(m.emulated is not None and m.emulated.kv_tokens for m in models):
        raise ValueError(
            "models[i].emulated.kv_tokens: mode 'per-token' keeps no KV pool on emulated engines (requests "
            "would run as if memory were free); leave it out, or use mode routed or lockstep"
        )
    pool_less = backend == "hash" or (
        backend == "emulated" and any(m.emulated is None or m.emulated.kv_tokens is None for m in models)
    )
    if kv_admission and pool_less:
        raise ValueError(
            f"server.kv_admission needs a KV pool on every model; backend {backend!r} has none without "
            "models[i].emulated.kv_tokens, so it would do nothing"
        )
    if policy != "cost" and (pool_less or mode == "per-token"):  # a choice other than the default, made for nothing
        where = (
            "mode 'per-token' (its engines keep vLLM's own accounting)"
            if mode == "per-token"
            else f"backend {backend!r} without a KV pool on every model (models[i].emulated.kv_tokens)"
        )
        raise ValueError(f"memory.policy {policy!r} does nothing with {where}; leave it out")
    if kv_admission and (mode != "routed" or policy == "off"):
        why = f"mode {mode!r}" if mode != "routed" else "memory.policy 'off' (no KV accounting)"
        raise ValueError(f"server.kv_admission needs mode 'routed' with KV accounting; it does nothing with {why}")


Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]


class NodeConstraintConfig(StrictSection):
    """Where one model's worker processes may run on a Ray cluster: node ``labels`` the node must carry
    (``ray start --labels``) and custom ``resources`` its bundle asks for (``ray start --resources``)."""

    labels: dict[str, str] = Field(default_factory=dict)
    resources: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _resources_positive(self) -> NodeConstraintConfig:
        bad = {k: v for k, v in self.resources.items() if not v > 0 or k in ("CPU", "GPU")}
        if bad:
            raise ValueError(f"resources must be custom names (not CPU/GPU: placement gives those) > 0, got {bad}")
        return self


class ClusterConfig(StrictSection):
    """``cluster:``: run the worker processes as Ray actors on a Ray cluster (see trserve.cluster). One placement
    group holds a bundle per worker ({"CPU": its cores} or, with ``accelerator: gpu``, {"GPU":
    tensor_parallel_size, "CPU": ...}), placed by ``strategy``; ``nodes`` pins a model's workers by node label or
    custom resource. Tokens and hand-offs stay on ZeroMQ."""

    backend: Literal["ray"] = "ray"
    #: ``auto`` (the cluster ``ray start --head`` made on this machine), ``ray://host:10001`` or ``host:6379``.
    address: str = Field("auto", min_length=1)
    strategy: Strategy = "PACK"
    accelerator: Literal["cpu", "gpu"] = "cpu"
    namespace: str = Field("tokenrouter", min_length=1)
    #: Seconds to wait for the placement group (every bundle placed) before giving up with the cluster's resources.
    placement_timeout_s: float = Field(60.0, gt=0)
    nodes: dict[str, NodeConstraintConfig] = Field(default_factory=dict)


def check_cluster(cluster: ClusterConfig, mode: str, models: list[ModelConfig]) -> None:
    """``cluster`` agrees with the mode and the models (ValueError naming the field otherwise)."""
    if mode != "routed":
        raise ValueError(f"cluster runs the routed mode only (mode {mode!r} is a single-machine baseline)")
    names = [m.name for m in models]
    unknown = sorted(set(cluster.nodes) - set(names))
    if unknown:
        raise ValueError(f"cluster.nodes names unknown models {unknown}; models are {names}")
    for i, m in enumerate(models):
        if cluster.accelerator == "gpu" and m.placement.gpus is not None:
            raise ValueError(
                f"models.{i}.placement.gpus: on a Ray cluster Ray picks the GPUs of each bundle; drop the ids and "
                "set tensor_parallel_size (cluster.accelerator: gpu gives each worker that many)"
            )
        if cluster.accelerator == "cpu" and m.placement.gpus is not None:
            raise ValueError(f"models.{i}.placement.gpus needs cluster.accelerator: gpu")
