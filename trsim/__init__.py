"""SimPy driver of the trcore scheduler: latency models, workloads, baselines, metrics, traces.

Typical use::

    from trsim import markov_config, simulate
    config = markov_config(P=[[0.65, 0.35], [1, 0]], C=[[1, 0], [1, 0]], latency=[0.006, 0.0279],
                           thresholds=[4, 1], concurrency=16, workload="short-reasoning")
    result = simulate(config, tokens=100_000)
    print(result.throughput_tok_s, result.latency_p99_s)
"""

from trsim.baselines import BASELINES, apply_baseline
from trsim.build import markov_config, with_traces
from trsim.config import PerTokenConfig, SimConfig
from trsim.driver import Simulation, simulate
from trsim.latency import latency_model_names, make_latency_model
from trsim.metrics import SimResult
from trsim.roofline import RooflineModel  # registers the 'roofline' latency model
from trsim.routing import RouterConfig
from trsim.workload import PRESETS, WorkloadConfig, preset

__all__ = [
    "BASELINES",
    "PRESETS",
    "PerTokenConfig",
    "RooflineModel",
    "RouterConfig",
    "SimConfig",
    "SimResult",
    "Simulation",
    "WorkloadConfig",
    "apply_baseline",
    "latency_model_names",
    "make_latency_model",
    "markov_config",
    "preset",
    "simulate",
    "with_traces",
]
