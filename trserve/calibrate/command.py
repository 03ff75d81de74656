"""``tokenrouter calibrate``: profile each model of a serve config on its real placement and write its latency
profile (``<out>/<hardware-tag>/<model>.json``, docs/profile-schema.md).

One model at a time, each in a fresh process placed exactly as the server places it (the same core set or GPUs,
environment and engine settings), so one model's measurement is not disturbed by another's. The parent validates
everything before any engine starts, shows progress, and fits and writes the profiles.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trserve.calibrate.plan import CalibrationGrid, check_grid_for_model
from trserve.calibrate.profile import build_profile
from trserve.config import ServeConfig
from trserve.entrypoints import worker_command
from trserve.hardware import tag_for
from trserve.runtime import refusal
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.placement import place_models
from trserve.runtime.runspec import RunSpec, resolve_model_path
from trserve.server.launch import log_tail
from trsim.profile import save_profile

#: Receives the worker's progress events: ``(model name, event dict)``.
OnEvent = Callable[[str, dict[str, Any]], None]


class CalibrationError(RuntimeError):
    """A calibration process failed; the message carries its exit status and log tail."""


@dataclass(frozen=True)
class CalibratedModel:
    """One written profile: the model, where the profile went, and the profile itself."""

    name: str
    path: Path
    profile: Any  # trsim.profile.LatencyProfile


def select_models(cfg: ServeConfig, names: Sequence[str] | None) -> list[int]:
    """Indices of the models to calibrate (all when ``names`` is None); unknown names list the valid ones."""
    valid = [m.name for m in cfg.models]
    if not names:
        return list(range(len(valid)))
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ConfigError("models", f"unknown model {unknown[0]!r}; valid: {', '.join(valid)}")
    return [valid.index(n) for n in dict.fromkeys(names)]


def max_batch(cfg: ServeConfig, model: int) -> int:
    """The largest batch the server lets model ``model`` step (as ``RunSpec.policy`` computes it)."""
    limit = cfg.models[model].max_num_seqs
    return min(cfg.batching.max_batch or limit, limit)


def run_spec(cfg: ServeConfig, run_dir: Path, indices: Collection[int]) -> RunSpec:
    """The server's resolved run (placements; the paths of models ``indices``) without its addresses."""

    paths = tuple(
        resolve_model_path(m.path, f"models.{i}.path") if i in indices else m.path for i, m in enumerate(cfg.models)
    )
    placements = tuple(place_models(list(cfg.models)))
    ones = (1,) * cfg.num_models  # thresholds: unused here, but a RunSpec carries them
    return RunSpec(cfg, paths, ones, placements, Endpoints(str(run_dir), cfg.num_models))


def check_request(
    cfg: ServeConfig, grid: CalibrationGrid, models: Sequence[str] | None, given: Collection[str]
) -> list[int]:
    """Everything that can be wrong before an engine starts: model names, grid values the user chose (``given``),
    model paths. Returns the indices of the models to calibrate."""
    indices = select_models(cfg, models)
    for i in indices:
        m = cfg.models[i]
        check_grid_for_model(grid, m.name, max_batch(cfg, i), m.max_model_len, given)
        resolve_model_path(m.path, f"models.{i}.path")
    return indices


def calibrate(
    cfg: ServeConfig,
    grid: CalibrationGrid,
    out_dir: Path,
    models: Sequence[str] | None = None,
    tag: str | None = None,
    command: str = "",
    on_event: OnEvent | None = None,
    given: Collection[str] = (),
) -> list[CalibratedModel]:
    """Profile the selected models one after the other and write their profiles; returns what was written.
    Grid fields named in ``given`` (chosen by the user) must fit every selected model; others are trimmed."""

    indices = check_request(cfg, grid, models, given)
    with tempfile.TemporaryDirectory(prefix="tokenrouter-calibrate-") as tmp:
        spec = run_spec(cfg, Path(tmp), indices)
        spec_path = Path(tmp) / "run.json"
        spec.save(spec_path)
        written = []
        for i in indices:
            name = cfg.models[i].name
            raw = run_worker(spec, spec_path, i, grid, Path(tmp), on_event or (lambda _n, _e: None))
            created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            profile = build_profile(name, raw, grid.as_dict(), command, created)
            path = out_dir / (tag or tag_for(raw["machine"].get("accelerator"))) / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            save_profile(profile, path)
            written.append(CalibratedModel(name, path, profile))
    return written


def run_worker(spec: RunSpec, spec_path: Path, model: int, grid: CalibrationGrid, tmp: Path, on_event: OnEvent) -> Any:
    """Run model ``model``'s measurement in its own placed process; returns its raw result."""
    name, placement = spec.config.models[model].name, spec.placements[model]
    out, log = tmp / f"raw-{model}.json", tmp / f"{name}.log"
    job = {"run_spec": str(spec_path), "model": model, "grid": grid.as_dict(), "out": str(out),
           "max_batch": max_batch(spec.config, model)}  # fmt: skip
    job_path = tmp / f"job-{model}.json"
    job_path.write_text(json.dumps(job))
    env = {**os.environ, **placement.environment(), "PYTHONUNBUFFERED": "1"}
    cpus = set(placement.cpus)
    read_fd, write_fd = os.pipe()
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            worker_command("calibration", str(job_path), str(write_fd)),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=(write_fd,),
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as events:
            for line in events:
                with contextlib.suppress(json.JSONDecodeError):
                    on_event(name, json.loads(line))
        code = proc.wait()
    finally:
        _stop(proc)
    if code != 0 or not out.is_file():
        tail = log_tail(log)
        refused = refusal.find(tail) if code == refusal.EXIT_STATUS else None
        if refused is not None:
            raise refused
        raise CalibrationError(f"calibration of {name!r} exited with status {code}; last lines of its log:\n{tail}")
    return json.loads(out.read_text())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
