"""Entry point of one calibration process: ``python -m trserve.calibrate.worker JOB_JSON PROGRESS_FD``.

The parent (:mod:`trserve.calibrate.command`) fixed this process's placement before it started, as the server's
launcher does (CPU affinity, ``OMP_NUM_THREADS`` / ``VLLM_CPU_*``, or ``CUDA_VISIBLE_DEVICES``). The model's engine
starts with exactly the settings the server would give it (:func:`trserve.runtime.worker.engine_config`), runs
the plan and writes its raw measurements and the machine description to the job's ``out`` file. Progress goes
to ``PROGRESS_FD`` as JSON lines; vLLM's own output goes to stdout/stderr (the parent's log file).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from trcore.errors import ConfigError
from trserve.calibrate.measure import run_plan
from trserve.calibrate.plan import CalibrationGrid, make_plan
from trserve.hardware import cpu_model
from trserve.runtime.refusal import EXIT_STATUS, announce
from trserve.runtime.runspec import RunSpec
from trserve.runtime.worker import _die_with_parent, start_vllm_engine


def _emit(channel: IO[str], **event: Any) -> None:
    channel.write(json.dumps(event) + "\n")
    channel.flush()


def _grid(data: dict[str, Any]) -> CalibrationGrid:
    return CalibrationGrid(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine_info(engine_settings: dict[str, Any]) -> dict[str, Any]:
    """Where and with what the steps ran (the profile's ``machine``; its ``description`` is added later)."""
    import torch

    cpus = sorted(os.sched_getaffinity(0))
    on_gpu = bool(os.environ.get("CUDA_VISIBLE_DEVICES")) and torch.cuda.is_available()
    return {
        "device": "cuda" if on_gpu else "cpu",
        "accelerator": torch.cuda.get_device_name(0) if on_gpu else None,
        "num_threads": torch.get_num_threads(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus": cpus,
        "vllm": _version("vllm-cpu", "vllm"),
        "vllm_package": "vllm-cpu" if _version("vllm-cpu") else "vllm",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dtype": engine_settings["dtype"],
    }


def engine_settings(engine: Any) -> dict[str, Any]:
    cfg = engine.config
    keys = ("dtype", "max_model_len", "block_size", "kv_cache_gib", "max_num_seqs", "handoff", "enforce_eager",
            "enable_prefix_caching", "entropy", "top_logprobs")  # fmt: skip
    return {**{k: getattr(cfg, k) for k in keys}, "kv_capacity_tokens": engine.kv_capacity_tokens}


def run_job(job: dict[str, Any], progress: IO[str]) -> dict[str, Any]:
    """Start the engine, run the plan, return everything the profile needs."""

    spec, model, grid = RunSpec.load(job["run_spec"]), int(job["model"]), _grid(job["grid"])
    load_before, started = os.getloadavg(), time.perf_counter()
    _emit(progress, event="starting")
    engine = start_vllm_engine(spec, model)
    start_s = time.perf_counter() - started
    try:
        settings = engine_settings(engine)
        cfg = engine.config
        plan = make_plan(grid, int(job["max_batch"]), cfg.max_model_len, engine.kv_capacity_tokens, cfg.block_size)
        _emit(progress, event="plan", total=plan.num_steps)
        on_gpu = spec.placements[model].gpus is not None
        raw = run_plan(
            engine,
            plan,
            lambda done, total, label: _emit(progress, event="step", done=done, total=total, label=label),
            check_waits=not on_gpu,
        )
    finally:
        engine.close()
    load_after = os.getloadavg()
    return {
        **raw,
        "skipped": list(plan.skipped),
        "engine": settings,
        "machine": machine_info(settings),
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "engine_start_s": start_s,
        "duration_s": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())

    _die_with_parent()
    with os.fdopen(int(args[1]), "w") as progress:
        try:
            result = run_job(job, progress)
        except ConfigError as exc:  # the engine refused the model's settings: the command says it in one line
            announce(exc)
            return EXIT_STATUS
        Path(job["out"]).write_text(json.dumps(result))
        _emit(progress, event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
