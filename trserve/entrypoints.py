"""Every ``python -m`` worker entry point of the project, by role: the one place their module names are written.

Launchers start a worker as ``[sys.executable, "-m", WORKERS[role], ...]`` (see :func:`worker_command`); the
arguments each expects are in its module's docstring.
"""

from __future__ import annotations

import sys

#: role -> module run with ``python -m``.
WORKERS: dict[str, str] = {
    "server": "tokenrouter",  # `tokenrouter serve` as a child process (demo, tests, bench)
    "subserver": "trserve.runtime.worker",  # one routed model: engine + trcore subserver loop
    "lockstep-driver": "trserve.baselines.lockstep",  # the lockstep baseline's scheduler
    "lockstep-engine": "trserve.baselines.engine_worker",  # one engine stepped by the lockstep driver
    "pertoken-dispatcher": "trserve.baselines.pertoken_dispatch",  # the per-token baseline's dispatcher
    "pertoken-engine": "trserve.baselines.pertoken",  # one plain engine of the per-token baseline
    "calibration": "trserve.calibrate.worker",  # times one model's steps for `tokenrouter calibrate`
    "crossval-subserver": "trserve.crossval.worker",  # a subserver that also records its steps
    "bench-direct": "trserve.bench.direct",  # plain vLLM driven directly: the overhead reference
    "crossval-rediagnose": "trserve.crossval.rediagnose",  # re-derives a written crossval run's diagnosis
    "crossval-repredict": "trserve.crossval.repredict",  # re-simulates a written crossval run with today's simulator
    "vllm-openai-server": "vllm.entrypoints.openai.api_server",  # vLLM's own server: what a user runs instead
    "vllm-bench-serve": "trserve.bench.vllm_client",  # vLLM's own benchmark client (`vllm bench serve`)
}


def worker_module(role: str) -> str:
    """The module of worker ``role``; an unknown role lists the valid ones."""
    try:
        return WORKERS[role]
    except KeyError:
        raise KeyError(f"unknown worker role {role!r}; valid: {', '.join(sorted(WORKERS))}") from None


def worker_command(role: str, *args: str) -> list[str]:
    """The argv that starts worker ``role`` with this interpreter."""
    return [sys.executable, "-m", worker_module(role), *args]
