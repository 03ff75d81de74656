"""Analytic throughput model of delayed batching (docs/throughput-model.md) and its threshold optimizer.

``spec`` validates inputs, ``states`` holds the transition halves, ``rules`` the launch decisions explored,
``universe`` the breadth-first state exploration, ``chain`` one threshold vector's chain, ``solve`` the
stationary solve; ``lanes`` samples the same process and ``sampled`` races estimates where the chain is too
large; ``memory`` checks that N requests fit in the models' KV caches; ``results`` holds what the public API
(``model``) returns.
"""

from trcore.throughput.grid import optimize_on_grid, threshold_grid
from trcore.throughput.memory import KVDemand, MemoryVerdict, memory_check
from trcore.throughput.model import METHODS, ThroughputModel, feasible_thresholds
from trcore.throughput.results import OptimizeResult, ThroughputResult
from trcore.throughput.sampled import SamplingConfig

__all__ = [
    "METHODS",
    "KVDemand",
    "MemoryVerdict",
    "OptimizeResult",
    "SamplingConfig",
    "ThroughputModel",
    "ThroughputResult",
    "feasible_thresholds",
    "memory_check",
    "optimize_on_grid",
    "threshold_grid",
]
