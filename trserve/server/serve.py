"""``tokenrouter serve``: resolve the config, start the worker processes, run the HTTP front end, stop cleanly."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from trcore.errors import ConfigError
from trserve.cluster.bundles import cluster_placements
from trserve.cluster.handles import Spawner
from trserve.cluster.ray_spawner import RaySpawner, check_address
from trserve.config import ServeConfig
from trserve.engine.stand_in_tokenizer import load_tokenizer
from trserve.frontend.app import ServerContext, create_app
from trserve.frontend.book import FrontEnd
from trserve.frontend.metrics import Metrics
from trserve.frontend.pinning import Pinning
from trserve.frontend.tuner import Tuner
from trserve.pairs.check import check_pair
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.placement import Placement, merge, place_models, place_processes
from trserve.runtime.runspec import RunSpec, resolve_model_path
from trserve.runtime.transport import FRONTEND, CurveKeys
from trserve.runtime.worker import build_program
from trserve.server.drift import DriftProbe
from trserve.server.launch import Launcher, LaunchError, WorkerSpec
from trserve.server.thresholds import resolve_thresholds

log = logging.getLogger(__name__)
Report = Callable[[str], None]


def resolve(
    cfg: ServeConfig, run_dir: str, report: Report | None = None, probe: DriftProbe | None = None
) -> tuple[RunSpec, list[WorkerSpec]]:
    """Everything that can fail on bad input, checked before any process starts (``report``: what ``auto``
    thresholds chose; ``probe``: the drift probe they run first, see ``trserve.server.thresholds``)."""
    paths = tuple(_model_path(cfg, i) for i in range(cfg.num_models))
    check_pair(cfg, paths)  # a router or checkpoints of another pair: refused before anything starts
    thresholds = tuple(resolve_thresholds(cfg, paths, report, probe))
    if cfg.cluster is not None:
        placements = cluster_placements(cfg)
    elif cfg.mode == "routed":
        placements = place_processes(list(cfg.models), cfg.backend)
    else:
        placements = place_models(list(cfg.models))
    workers = worker_specs(cfg, placements)
    endpoints = run_endpoints(cfg, run_dir, len(workers))
    spec = RunSpec(cfg, paths, thresholds, tuple(placements), endpoints)
    for m in range(cfg.num_models):
        spec.policy(m)  # validates tables and max batch now, not in a worker
        build_program(spec, m)  # unknown programs and bad parameters too
    return spec, workers


def run_endpoints(cfg: ServeConfig, run_dir: str, num_procs: int) -> Endpoints:
    """The run's address table: nothing bound yet; fresh CURVE keys on ``tcp``."""
    server = cfg.server
    keys = CurveKeys.generate() if server.transport == "tcp" else None
    return Endpoints(run_dir, num_procs, (0,) * num_procs, server.transport, server.bind_host, keys=keys)


def _model_path(cfg: ServeConfig, model: int) -> str:
    """Model ``model``'s checkpoint; "" for an emulated model without one (no engine loads it)."""
    path = cfg.models[model].path
    if path is None:
        return ""
    return resolve_model_path(path, f"models.{model}.path")


def worker_specs(cfg: ServeConfig, placements: list[Placement]) -> list[WorkerSpec]:
    """The processes of a run: one subserver per model replica (routed; ``placements`` per process, in
    :class:`~trcore.replicas.ReplicaTable` order); or a driver (lockstep) or dispatcher (per-token) as worker 0
    plus one engine-only worker per model (worker ``1 + m`` serves model ``m``)."""
    if cfg.mode == "routed":
        names = [m.process_name(r) for m in cfg.models for r in range(m.replicas)]
        return [WorkerSpec(p, name, "subserver", placements[p]) for p, name in enumerate(names)]
    everything = merge(placements)
    if cfg.mode == "lockstep":
        # Models never run at once here, so each engine may use every core the models were given.
        driver = WorkerSpec(0, "lockstep", "lockstep-driver", everything)
        role, engine_places = "lockstep-engine", [everything] * len(placements)
    else:
        driver = WorkerSpec(0, "dispatcher", "pertoken-dispatcher", everything)
        role, engine_places = "pertoken-engine", placements
    engines = [WorkerSpec(1 + i, m.name, role, engine_places[i]) for i, m in enumerate(cfg.models)]
    return [driver, *engines]


def spawner_of(cfg: ServeConfig, run_dir: str) -> Spawner | None:
    """The Ray spawner when the config names a cluster; None: the launcher's default, this machine."""
    return RaySpawner(cfg.cluster, Path(run_dir).name) if cfg.cluster is not None else None


def api_key_of(cfg: ServeConfig) -> str | None:
    return cfg.server.api_key or os.environ.get(cfg.server.api_key_env) or None


async def serve(cfg: ServeConfig, report: Report | None = None, probe: DriftProbe | None = None) -> int:
    """Run the server until interrupted; returns the exit status (1: a worker failed to start; a
    worker that refused its model's settings raises the ConfigError it announced). Progress and
    failures go to ``report`` (default: this module's log); the CLI prints them. ``probe``: the drift probe of
    ``thresholds: auto`` (the CLI injects the crossval workers' one)."""
    say = report or log.info
    import uvicorn

    check_listen(cfg.server.host, cfg.server.port)
    if cfg.cluster is not None:  # Ray would retry an address nobody answers at for minutes, workers waiting
        check_address(cfg.cluster.address)
    run_dir = tempfile.mkdtemp(prefix="tokenrouter-")
    try:
        log_dir = _made_log_dir(cfg.server.log_dir, run_dir)
        spec, workers = resolve(cfg, run_dir, say, probe)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    frontend, metrics = start_frontend(cfg, spec, FrontEnd, _entry_process(cfg))
    launcher = Launcher(spec, workers, log_dir, frontend, metrics, cfg.server.restart, spawner_of(cfg, run_dir))
    where = f"logs in {log_dir}"
    if cfg.cluster is not None:
        where = f"on the Ray cluster at {cfg.cluster.address}; logs in {Path(run_dir).name}/ in each node's temp dir"
    say(f"starting {len(workers)} worker(s) ({cfg.mode}); {where}")
    try:
        tokenizer = load_tokenizer(next((p for p in spec.model_paths if p), None))
        await launcher.start_all(cfg.server.startup_timeout_s)
    except LaunchError as exc:
        say(f"error: {exc}")
        await frontend.close()
        return 1
    except ConfigError:  # a worker refused its model's settings: one line and exit status 2, as any bad setting
        await frontend.close()
        raise
    ctx = ServerContext(cfg, frontend, tokenizer, metrics, api_key_of(cfg), spec.model_paths)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(ctx),
            host=cfg.server.host,
            port=cfg.server.port,
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    )
    announce = asyncio.get_running_loop().create_task(_announce(server, cfg, say))
    try:
        await server.serve()
    finally:
        announce.cancel()
        await launcher.stop_all()
        await frontend.close()
        if cfg.server.log_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def check_listen(host: str, port: int) -> None:
    """Raise ConfigError naming the field when the API cannot listen on ``host:port`` (a port in use, a host that
    is not this machine's), before any worker starts (vLLM's take a minute), instead of uvicorn's error after.
    Binds as uvicorn's server will (every address of ``host``, reusing a port in TIME_WAIT), then lets go."""
    try:
        # "" is every interface to asyncio's server, as None is to getaddrinfo
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError("server.host", f"{host!r}: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:  # a family this machine lacks (IPv6): the server skips it too
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                field = "server.port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "server.host"
                raise ConfigError(field, f"cannot listen on {host}:{port}: {exc.strerror}") from None


def start_frontend(
    cfg: ServeConfig, spec: RunSpec, frontend_cls: type[FrontEnd], entry: int
) -> tuple[FrontEnd, Metrics]:
    """A started front end of class ``frontend_cls`` (entry process ``entry``) and its metrics; in the routed mode
    it sends every subserver process its active-request count (with replicas, the requests pinned to it:
    :class:`Pinning`)."""
    replica_names = [[m.process_name(r) for r in range(m.replicas)] for m in cfg.models]
    metrics = Metrics([m.name for m in cfg.models], replica_names)
    table = spec.table
    caps = [cfg.models[table.model_of(p)].max_num_seqs for p in range(table.num_procs)]
    pinning = Pinning(table, caps) if table.has_replicas else None
    frontend = frontend_cls(
        spec.endpoints.bind_address(FRONTEND),
        {},  # workers are connected as they report ready (trserve.server.launch)
        entry=entry,
        num_models=cfg.num_models,
        num_subservers=table.num_procs if cfg.mode == "routed" else 0,
        metrics=metrics,
        max_active=cfg.server.max_active_requests,
        max_waiting=cfg.server.max_waiting_requests,
        keys=spec.endpoints.keys,
        pinning=pinning,
        kv_admission=cfg.mode == "routed" and cfg.server.kv_admission,
    )
    frontend.start()
    if cfg.mode == "routed":
        frontend.thresholds = tuple(spec.thresholds)
    if cfg.mode in ("lockstep", "per-token"):  # process 0 (driver, dispatcher) receives every request
        frontend.driven_entry = cfg.entry_model
    if cfg.mode == "routed" and cfg.batching.thresholds == "adaptive":
        frontend.tuner = _tuner(cfg, spec, frontend, metrics)
        frontend.tuner.start()
    return frontend, metrics


def _tuner(cfg: ServeConfig, spec: RunSpec, frontend: FrontEnd, metrics: Metrics) -> Tuner:
    """The adaptive controller, from the run spec's thresholds (``batching.adaptive.initial`` or all 1)."""
    caps = [cfg.batching.max_batch or m.max_num_seqs for m in cfg.models]
    return Tuner(
        cfg.batching.adaptive,
        spec.thresholds,
        entry_model=cfg.entry_model,
        max_batch=caps,
        model_names=[m.name for m in cfg.models],
        registry=metrics.registry,
        broadcast=frontend.broadcast,
        num_active=lambda: frontend.num_active,
        pipelines=spec.table.pipelines,
    )


def _entry_process(cfg: ServeConfig) -> int:
    return cfg.entry_model if cfg.mode == "routed" else 0


async def _announce(server: object, cfg: ServeConfig, say: Report) -> None:
    while not getattr(server, "started", False):
        await asyncio.sleep(0.05)
    sockets = [s for srv in getattr(server, "servers", []) for s in srv.sockets]
    port = sockets[0].getsockname()[1] if sockets else cfg.server.port
    names = ", ".join(m.name for m in cfg.models)
    host = f"[{cfg.server.host}]" if ":" in cfg.server.host else cfg.server.host  # an IPv6 address, as URLs write it
    say(f"serving {cfg.server.served_model_name!r} ({cfg.mode}: {names}) on http://{host}:{port}")


def _made_log_dir(wanted: str | None, run_dir: str) -> Path:
    """``server.log_dir``, made if missing (None: the run directory); one that cannot be made is a ConfigError
    naming the field (it was the OSError's bare path, and left the run directory behind)."""
    if not wanted:
        return Path(run_dir)
    path = Path(wanted)
    if path.exists() and not path.is_dir():
        raise ConfigError("server.log_dir", f"{wanted!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("server.log_dir", f"cannot make {wanted!r}: {exc.strerror}") from None
    return path
