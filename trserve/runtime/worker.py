"""Entry point of one subserver process: ``python -m trserve.runtime.worker RUN_JSON MODEL``.

The launcher has already set the placement (affinity, ``VLLM_CPU_*`` / ``CUDA_VISIBLE_DEVICES``) before this
interpreter started, so vLLM sees it on import. The process starts its engine, builds the model's routing
program and batching policy, tells the front end it is ready, then runs the loop until told to stop.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from trcore import PROGRAMS, RoutingProgram, Subserver, check_signals
from trcore.errors import ConfigError
from trserve.engine.emulated import EmulatedEngine, EmulatedLatency
from trserve.engine.hash import HashEngine
from trserve.engine.step_engine import StepEngine
from trserve.engine.types import Engine, EngineConfig
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.memory_setup import build_memory
from trserve.runtime.messages import Ready
from trserve.runtime.refusal import EXIT_STATUS, announce, settings_error
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND

log = logging.getLogger(__name__)


def build_program(spec: RunSpec, model: int) -> RoutingProgram:
    """Model ``model``'s instance of the configured routing program (built-ins and trserve's own registered)."""

    router = spec.config.router
    return PROGRAMS.create(router.program, model, spec.config.num_models, **router.params)


def routing_signals(spec: RunSpec, model: int) -> dict[str, Any]:
    """Engine settings for the signals model ``model``'s routing program reads. Top-k logprobs and the exact
    entropy cost CPU every step, so an engine computes them only for a program that needs them (a reader of
    ``top_logprobs`` gets the exact entropy too: rstitch prefers it when a step carries it)."""
    if spec.config.backend in ("hash", "emulated"):
        return {}
    needed = build_program(spec, model).required_signals
    return {
        "top_logprobs": spec.config.top_logprobs if "top_logprobs" in needed else 0,
        "entropy": bool(needed & {"top_logprobs", "entropy"}),
    }


def all_signals(spec: RunSpec) -> dict[str, Any]:
    """Engine settings that give every signal (crossval swaps routing programs on running engines)."""
    return {"top_logprobs": spec.config.top_logprobs, "entropy": True}


def engine_config(spec: RunSpec, model: int, **overrides: Any) -> Any:
    """The ``trserve.engine.step_engine.EngineConfig`` of model ``model`` (fields the engine lacks are left out); the
    routing signals follow the configured program (:func:`routing_signals`) unless ``overrides`` set them."""

    m = spec.config.models[model]
    values: dict[str, Any] = {
        "model_path": spec.model_paths[model],
        "dtype": m.dtype,
        "max_model_len": m.max_model_len,
        "block_size": m.block_size,
        "kv_cache_gib": m.kv_cache_gib,
        "max_num_seqs": m.max_num_seqs,
        "seed": spec.config.seed,
        "handoff": spec.config.handoff,
        "tensor_parallel_size": m.placement.tensor_parallel_size,
        **routing_signals(spec, model),
        **overrides,
    }
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**{k: v for k, v in values.items() if k in known})


def start_engine(spec: RunSpec, model: int, **overrides: Any) -> Engine:
    """The model's engine, as the config's backend says (``overrides``: engine settings)."""
    if spec.config.backend == "hash":
        return HashEngine(model, step_s=0.005)
    if spec.config.backend == "emulated":
        return EmulatedEngine.from_model_config(model, spec.config.models[model], seed=spec.config.seed + model)
    return start_vllm_engine(spec, model, **overrides)


def start_vllm_engine(spec: RunSpec, model: int, **overrides: Any) -> StepEngine:
    """Model ``model``'s vLLM engine; vLLM's refusal of its settings is a ConfigError naming the config's field."""
    config = engine_config(spec, model, **overrides)
    try:
        return StepEngine(config)
    except ConfigError:
        raise
    except ValueError as exc:  # vLLM checks the settings only now, and words its refusal in its own terms
        raise settings_error(exc, model) from exc


def emulated_latency(spec: RunSpec, model: int) -> EmulatedLatency:
    """Model ``model``'s emulated step latency (``backend: emulated``), seeded per model for its jitter."""
    emulated = spec.config.models[model].emulated
    if emulated is None:
        raise ValueError(f"models.{model}.emulated is required with backend: emulated")
    return EmulatedLatency.from_config(emulated, seed=spec.config.seed + model)


def _die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the launcher dies, so no engine is left orphaned."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(
    spec: RunSpec,
    proc: int,
    loop_cls: type[SubserverLoop] = SubserverLoop,
    engine_overrides: dict[str, Any] | None = None,
) -> None:
    """Start subserver process ``proc`` (replica ``spec.table.replica_of(proc)`` of model
    ``spec.table.model_of(proc)``; with one replica per model, model ``proc``) and serve until shutdown;
    ``loop_cls`` and ``engine_overrides`` let a variant (crossval) extend the loop and the engine's settings."""
    table = spec.table
    model, replica = table.procs[proc]
    program = build_program(spec, model)
    engine = start_engine(spec, model, **(engine_overrides or {}))
    try:
        check_signals(program, engine.available_signals)
        mailbox = spec.endpoints.mailbox(proc)
        sub = Subserver(program, spec.policy(model), memory=build_memory(spec, model, engine))
        loop = loop_cls(sub, engine, mailbox, table=table, replica=replica)
        signals = tuple(sorted(engine.available_signals))
        capacity = sub.memory.ledger.budget.capacity_tokens if sub.memory is not None else 0
        ready = Ready(proc, os.getpid(), engine.kv_usage(), signals, mailbox.address, kv_capacity_tokens=capacity)
        mailbox.send(FRONTEND, ready)
        name = spec.config.models[model].process_name(replica)
        log.info("model %d (%s, process %d) ready at %s: policy %s", model, name, proc, mailbox.address, sub.policy)
        loop.run()
        mailbox.close()
    finally:
        engine.close()


def worker_main(run_worker: Callable[[RunSpec, int], None], argv: list[str] | None = None) -> None:
    """The common entry of a worker process: ``RUN_JSON INDEX`` arguments, logging, dying with the launcher."""
    parser = argparse.ArgumentParser()
    parser.add_argument("run_json")
    parser.add_argument("index", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _die_with_parent()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    spec = RunSpec.load(args.run_json)
    log.info("worker %d: pid %d, cpus %s", args.index, os.getpid(), sorted(os.sched_getaffinity(0)))
    try:
        run_worker(spec, args.index)
    except ConfigError as exc:  # a setting this process found wrong: the launcher reports it as one line
        log.exception("worker %d refused its settings", args.index)
        announce(exc)
        raise SystemExit(EXIT_STATUS) from None


def main(argv: list[str] | None = None) -> None:
    worker_main(run, argv)


if __name__ == "__main__":
    sys.exit(main())
