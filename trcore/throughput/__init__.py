"""Analytic throughput model of delayed batching (DESIGN.md section 4) and its threshold optimizer.

``spec`` validates inputs, ``states`` holds the transition halves, ``rules`` the launch decisions explored,
``universe`` the breadth-first state exploration, ``chain`` one threshold vector's chain, ``solve`` the
stationary solve, ``model`` the public API.
"""

from trcore.throughput.model import OptimizeResult, ThroughputModel, ThroughputResult, feasible_thresholds

__all__ = ["OptimizeResult", "ThroughputModel", "ThroughputResult", "feasible_thresholds"]
