"""The built-in token-routing algorithms as routing programs, registered by name on import.

Model 0 is the small model (SLM), model 1 the large one (LLM):

* ``rstitch``: entropy threshold both ways (:mod:`trcore.programs.rstitch`);
* ``r2r``: learned divergence router, the LLM regenerates one token (:mod:`trcore.programs.r2r`);
* ``citer``: learned token router, the LLM writes one token (:mod:`trcore.programs.citer`);
* ``colllm``: deferral score above ``eta`` (:mod:`trcore.programs.colllm`);
* ``mixture``: the next token's model drawn by weights, any number of models (:mod:`trcore.programs.mixture`).
* ``schedule``: decisions the request carries with it, for tests and debugging (:mod:`trcore.programs.schedule`).
"""

from trcore.programs.citer import CiterProgram
from trcore.programs.colllm import CoLLMProgram
from trcore.programs.mixture import MixtureProgram
from trcore.programs.mlp import MLPRouter, random_router
from trcore.programs.r2r import R2RProgram
from trcore.programs.rstitch import RStitchProgram
from trcore.programs.schedule import ScheduleProgram
from trcore.programs.signals import confidence_features, entropy_from_top_logprobs, step_entropies

__all__ = [
    "CiterProgram",
    "CoLLMProgram",
    "MLPRouter",
    "MixtureProgram",
    "R2RProgram",
    "RStitchProgram",
    "ScheduleProgram",
    "confidence_features",
    "entropy_from_top_logprobs",
    "random_router",
    "step_entropies",
]
