"""TokenRouter's scheduler core: requests, routing programs, delayed batching, throughput model.

Pure Python with no clock, no I/O and no torch/vLLM/SimPy: drivers (trsim, trserve) pass the time in.
"""

# Importing the programs package registers the built-in routing programs (rstitch, r2r, citer, ...).
from trcore import programs
from trcore.errors import ConfigError, InfeasibleError, MemoryInfeasibleError, NotIrreducibleError, ProgramError
from trcore.kvplan import KVMemory, MemoryStats
from trcore.memory import KVBudget, KVLedger
from trcore.policy import BatchingPolicy, check_feasible, is_feasible, policies_for
from trcore.program import PROGRAMS, RoutingProgram, check_signals, register_program
from trcore.request import CLIENT, PeerReq, Request, RequestSpec, RequestStatus, new_request_message
from trcore.routers import MarkovRouter, TraceReplayRouter
from trcore.spill import SPILL_POLICIES, ParkedSession, SpillPolicy, StepCost, spill_policy
from trcore.step import Batch, Routing, StepResult
from trcore.subserver import ProtocolError, RouteEvent, Subserver

__all__ = [
    "CLIENT",
    "PROGRAMS",
    "SPILL_POLICIES",
    "Batch",
    "BatchingPolicy",
    "ConfigError",
    "InfeasibleError",
    "KVBudget",
    "KVLedger",
    "KVMemory",
    "MarkovRouter",
    "MemoryInfeasibleError",
    "MemoryStats",
    "NotIrreducibleError",
    "ParkedSession",
    "PeerReq",
    "ProgramError",
    "ProtocolError",
    "Request",
    "RequestSpec",
    "RequestStatus",
    "RouteEvent",
    "Routing",
    "RoutingProgram",
    "SpillPolicy",
    "StepCost",
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
    "spill_policy",
]
