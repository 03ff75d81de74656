"""TokenRouter's scheduler core: requests, routing programs, delayed batching, throughput model.

Pure Python with no clock, no I/O and no torch/vLLM/SimPy: drivers (trsim, trserve) pass the time in.
"""

# Importing the programs package registers the built-in routing programs (rstitch, r2r, citer, ...).
from trcore import programs
from trcore.errors import ConfigError, InfeasibleError, NotIrreducibleError
from trcore.policy import BatchingPolicy, check_feasible, is_feasible, policies_for
from trcore.program import PROGRAMS, RoutingProgram, check_signals, register_program
from trcore.request import CLIENT, PeerReq, Request, RequestSpec, RequestStatus, new_request_message
from trcore.routers import MarkovRouter, TraceReplayRouter
from trcore.step import Batch, Routing, StepResult
from trcore.subserver import ProtocolError, RouteEvent, Subserver

__all__ = [
    "CLIENT",
    "PROGRAMS",
    "Batch",
    "BatchingPolicy",
    "ConfigError",
    "InfeasibleError",
    "MarkovRouter",
    "NotIrreducibleError",
    "PeerReq",
    "ProtocolError",
    "Request",
    "RequestSpec",
    "RequestStatus",
    "RouteEvent",
    "Routing",
    "RoutingProgram",
    "StepResult",
    "Subserver",
    "TraceReplayRouter",
    "check_feasible",
    "check_signals",
    "is_feasible",
    "new_request_message",
    "policies_for",
    "programs",
    "register_program",
]
