"""From the serve config to a Ray placement group: each worker's placement on a cluster, its bundle (the resources
Ray reserves for it on one node) and its node label selector. Pure functions; no Ray."""

from __future__ import annotations

from trserve.config import ServeConfig
from trserve.model_config import ClusterConfig, ModelConfig, NodeConstraintConfig
from trserve.runtime.placement import Placement, available_cpus, place_processes

Bundle = dict[str, float]
NO_CONSTRAINT = NodeConstraintConfig()


def _with_placeholder_gpus(model: ModelConfig) -> ModelConfig:
    """The model asking for ``tensor_parallel_size`` GPUs per replica, ids 0.. as placeholders (Ray picks the real
    ones on each worker's node)."""
    count = model.placement.tensor_parallel_size * model.replicas
    return model.model_copy(update={"placement": model.placement.model_copy(update={"gpus": list(range(count))})})


def cluster_placements(cfg: ServeConfig) -> list[Placement]:
    """One placement per worker process (model by model, replica by replica) on a cluster. Explicit
    ``placement.cpus`` are core ids on the worker's node (this machine need not have them) split among the model's
    replicas; a model without them gets an even share of this machine's cores, counted the same way. Each worker
    is pinned to those of its cores that its node has; with ``cluster.accelerator: gpu`` each gets
    ``tensor_parallel_size`` GPUs, which Ray picks on its node."""
    cluster = cfg.cluster or ClusterConfig()
    models = list(cfg.models)
    if cluster.accelerator == "gpu":
        models = [_with_placeholder_gpus(m) for m in models]
    claimed = {c for m in models for c in m.placement.cpus or ()}
    return place_processes(models, cfg.backend, sorted(set(available_cpus()) | claimed))


def constraint_of(cluster: ClusterConfig, name: str) -> NodeConstraintConfig:
    """The node constraint of worker ``name``: ``cluster.nodes`` is keyed by model name, and every replica of a
    model (process ``NAME-rR``) shares its model's."""
    if name in cluster.nodes:
        return cluster.nodes[name]
    model, sep, replica = name.rpartition("-r")
    return cluster.nodes.get(model, NO_CONSTRAINT) if sep and replica.isdecimal() else NO_CONSTRAINT


def bundle_of(cluster: ClusterConfig, name: str, placement: Placement) -> Bundle:
    """The resources reserved for worker ``name``: its cores, its GPUs and the custom resources that pin it."""
    bundle: Bundle = {"CPU": float(len(placement.cpus))}
    if placement.gpus is not None:
        bundle["GPU"] = float(len(placement.gpus))
    bundle.update(constraint_of(cluster, name).resources)
    return bundle


def bundles_of(cluster: ClusterConfig, workers: list[tuple[str, Placement]]) -> list[Bundle]:
    """One bundle per worker, in worker index order (bundle ``i`` hosts worker ``i``)."""
    return [bundle_of(cluster, name, placement) for name, placement in workers]


def label_selectors(cluster: ClusterConfig, workers: list[tuple[str, Placement]]) -> list[dict[str, str]] | None:
    """One node label selector per bundle, or None when no worker asks for labels."""
    selectors = [dict(constraint_of(cluster, name).labels) for name, _ in workers]
    return selectors if any(selectors) else None


def describe(bundles: list[Bundle], names: list[str]) -> str:
    """``name {CPU: 1, GPU: 8}, ...`` for messages."""
    return ", ".join(
        f"{n} {{{', '.join(f'{k}: {v:g}' for k, v in b.items())}}}" for n, b in zip(names, bundles, strict=True)
    )
