"""Where each model process runs: disjoint CPU core sets or GPUs, expressed as affinity and environment."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from trcore.errors import ConfigError
from trserve.model_config import ModelConfig


@dataclass(frozen=True)
class Placement:
    """A process's devices: ``cpus`` (affinity; always set) and, on CUDA, ``gpus``."""

    cpus: tuple[int, ...]
    gpus: tuple[int, ...] | None = None
    kv_cache_gib: float = 1.0

    def environment(self) -> dict[str, str]:
        """Variables that must be set before vLLM is imported in the process."""
        env = {"OMP_NUM_THREADS": str(len(self.cpus))}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        else:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, self.cpus))
            # vLLM reads whole GiB here; the engine's own kv_cache_gib setting is the finer bound.
            env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(self.kv_cache_gib)))
        return env


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def place_models(models: list[ModelConfig], cpus: list[int] | None = None) -> list[Placement]:
    """One placement per model. Models without explicit cores share the cores nobody claimed, evenly and
    disjointly; when there are fewer free cores than such models, each still gets one (shared) core."""
    cpus = available_cpus() if cpus is None else cpus
    claimed = {c for m in models for c in m.placement.cpus or ()}
    missing = claimed - set(cpus)
    if missing:
        raise ConfigError("placement.cpus", f"cores {sorted(missing)} are not available here (have {cpus})")
    free = [c for c in cpus if c not in claimed]
    auto = [i for i, m in enumerate(models) if m.placement.cpus is None]
    shares = _split(free or cpus, len(auto))
    out = []
    for i, m in enumerate(models):
        if m.placement.gpus is None and m.placement.tensor_parallel_size > 1:
            raise ConfigError(f"models.{i}.placement", "tensor_parallel_size > 1 needs gpus")
        own = tuple(m.placement.cpus) if m.placement.cpus is not None else shares[auto.index(i)]
        gpus = tuple(m.placement.gpus) if m.placement.gpus is not None else None
        out.append(Placement(cpus=own, gpus=gpus, kv_cache_gib=m.kv_cache_gib))
    return out


def place_processes(models: list[ModelConfig], backend: str, cpus: list[int] | None = None) -> list[Placement]:
    """One placement per subserver process (``ReplicaTable`` order: model by model, replica by replica). A model's
    cores or GPUs are split evenly among its replicas; models without explicit cores share the free cores among
    all their replicas. Real engines (``vllm``) need a core of their own per process; stand-in engines (hash,
    emulated) only wait, so their processes may share cores."""
    cpus = available_cpus() if cpus is None else cpus
    if all(m.replicas == 1 for m in models):
        return place_models(models, cpus)
    claimed = {c for m in models for c in m.placement.cpus or ()}
    free = [c for c in cpus if c not in claimed]
    num_auto = sum(m.replicas for m in models if m.placement.cpus is None)
    if backend == "vllm" and num_auto > len(free):
        raise ConfigError(
            "models.replicas",
            f"not enough cores: {num_auto} processes (models x replicas without placement.cpus) need a core "
            f"each, {len(free)} free of {len(cpus)}; lower replicas or give placement.cpus",
        )
    per_model = place_models(models, cpus)
    auto_shares = iter(_split(free or cpus, num_auto))
    out = []
    for m, (model, whole) in enumerate(zip(models, per_model, strict=True)):
        k = model.replicas
        own = _split(list(whole.cpus), k) if model.placement.cpus is not None else [next(auto_shares) for _ in range(k)]
        if whole.gpus is not None:
            tp = model.placement.tensor_parallel_size
            gpu_sets: list[tuple[int, ...] | None] = [whole.gpus[r * tp : (r + 1) * tp] for r in range(k)]
        else:
            gpu_sets = [None] * k
        if model.placement.cpus is not None and len(model.placement.cpus) < k:
            raise ConfigError(f"models.{m}.placement.cpus", f"{len(model.placement.cpus)} core(s) for {k} replicas")
        out += [Placement(cpus=own[r], gpus=gpu_sets[r], kv_cache_gib=model.kv_cache_gib) for r in range(k)]
    return out


def merge(placements: list[Placement]) -> Placement:
    """One process running several models (the lockstep baseline) gets all their devices."""
    cpus = tuple(sorted({c for p in placements for c in p.cpus}))
    gpu_sets = [p.gpus for p in placements if p.gpus is not None]
    gpus = tuple(sorted({g for s in gpu_sets for g in s})) if gpu_sets else None
    return Placement(cpus=cpus, gpus=gpus, kv_cache_gib=sum(p.kv_cache_gib for p in placements))


def _split(cpus: list[int], parts: int) -> list[tuple[int, ...]]:
    if parts == 0:
        return []
    if len(cpus) < parts:
        return [(cpus[i % len(cpus)],) for i in range(parts)]
    size, extra = divmod(len(cpus), parts)
    out, start = [], 0
    for k in range(parts):
        n = size + (1 if k < extra else 0)
        out.append(tuple(cpus[start : start + n]))
        start += n
    return out
