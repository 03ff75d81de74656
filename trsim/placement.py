"""Placements of several models on a node's GPUs: tensor-parallel degrees, replicas, co-location, memory fit.

A placement is ``replicas`` identical pipelines; a pipeline holds one replica of every model. Separate
placements give each model its own ``tp`` GPUs in every pipeline; co-located ones run every model on the same
``tp`` GPUs (memory split between them, as R2R co-locates its pair). Replica counts are equal across models, so a
request pinned to one replica of each model it visits sees one pipeline, and ``replicas`` pipelines carrying 1/r
of the requests each are the whole system (the decomposition the planner uses; see docs/planning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from trcore import ConfigError
from trsim.roofline import RooflineModel, max_batch_tokens, with_params

TP_DEGREES = (1, 2, 4, 8)
#: Fraction of device memory a serving engine may use (weights + KV cache), as vLLM's gpu_memory_utilization.
MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class Placement:
    """``tp[m]`` GPUs per replica of model ``m``; ``replicas`` pipelines; ``colocated``: all models share them."""

    tp: tuple[int, ...]
    replicas: int
    colocated: bool

    @property
    def gpus_per_pipeline(self) -> int:
        return self.tp[0] if self.colocated else sum(self.tp)

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.gpus_per_pipeline

    def model_gpus(self, m: int) -> int:
        """GPUs that hold model ``m`` (shared ones counted for each model when co-located)."""
        return self.replicas * self.tp[m]

    @property
    def label(self) -> str:
        if self.colocated:
            return f"{self.replicas}x coloc tp{self.tp[0]}"
        return f"{self.replicas}x sep tp{'+'.join(map(str, self.tp))}"


def latency_models(
    placement: Placement, hardware: str, shapes: Mapping[str, str], dtype: str = "bf16"
) -> list[RooflineModel]:
    """One roofline per model (a tp that does not split a model's heads is refused). Co-located models contend for
    their GPUs: each is given half of the device's FLOP/s and bandwidth (both busy at once; pessimistic while the
    peer idles)."""
    models = [
        RooflineModel(hardware, shape, tp, dtype) for shape, tp in zip(shapes.values(), placement.tp, strict=True)
    ]
    for m in models:
        m.check_tp("tp")
    if not placement.colocated or len(models) == 1:
        return models
    share = 1 / len(models)
    return [
        with_params(
            m,
            flops_efficiency=m.params.flops_efficiency * share,
            bandwidth_efficiency=m.params.bandwidth_efficiency * share,
        )
        for m in models
    ]


def kv_capacity_tokens(placement: Placement, models: list[RooflineModel]) -> int:
    """Context tokens one pipeline can hold in KV cache for every model at once (0: the weights do not fit)."""
    if not placement.colocated:
        return min(max_batch_tokens(m, MEMORY_FRACTION) for m in models)
    device = models[0].device
    free = device.memory_bytes * MEMORY_FRACTION - sum(m.weight_bytes() for m in models)
    return max(int(free // sum(m.kv_bytes_per_token() for m in models)), 0)


def kv_capacities(placement: Placement, models: list[RooflineModel]) -> tuple[int, ...]:
    """Per model, the KV tokens one pipeline's copy holds: its own GPUs' room beside its weights, or when
    co-located the shared figure of :func:`kv_capacity_tokens` (each request holds KV on every model there)."""
    if not placement.colocated:
        return tuple(max_batch_tokens(m, MEMORY_FRACTION) for m in models)
    return (kv_capacity_tokens(placement, models),) * len(models)


def replica_shares(total: int, replicas: int) -> list[int]:
    """``total`` requests over ``replicas`` pipelines as the server's least-loaded pinning spreads them:
    ``total // replicas`` each and one more on ``total % replicas`` of them (8 over 3: 3, 3, 2)."""
    base, extra = divmod(total, replicas)
    return [base + 1] * extra + [base] * (replicas - extra)


def system_throughput(pipeline: Callable[[int], tuple[float, str]], total: int, replicas: int) -> tuple[float, str]:
    """The whole placement's throughput at ``total`` requests: ``pipeline(n)`` (tok/s, evaluator) of each
    replica's share summed, each distinct share evaluated once; the evaluator is the largest share's."""
    shares = replica_shares(total, replicas)
    found = {n: pipeline(n) for n in sorted(set(shares))}
    return sum(found[n][0] for n in shares), found[max(shares)][1]


def placements(num_gpus: int, num_models: int, colocation: bool = True) -> Iterator[Placement]:
    """Every placement on at most ``num_gpus`` GPUs: separate (a tp per model) and, with ``colocation``,
    co-located (one tp for all), each with 1 .. as many replicas as fit."""
    if num_gpus < 1 or num_models < 1:
        raise ConfigError("gpus", f"needs at least one GPU and one model, got {num_gpus} and {num_models}")
    degrees = [d for d in TP_DEGREES if d <= num_gpus]
    for tp in _vectors(degrees, num_models):
        for replicas in range(1, num_gpus // sum(tp) + 1):
            yield Placement(tp, replicas, colocated=False)
    if colocation and num_models > 1:
        for d in degrees:
            for replicas in range(1, num_gpus // d + 1):
                yield Placement((d,) * num_models, replicas, colocated=True)


def _vectors(degrees: list[int], length: int) -> Iterator[tuple[int, ...]]:
    if length == 0:
        yield ()
        return
    for d in degrees:
        for rest in _vectors(degrees, length - 1):
            yield (d, *rest)
