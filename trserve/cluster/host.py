"""The body of the Ray actor that hosts one worker process on its node (wrapped by ``ray.remote`` in
:mod:`trserve.cluster.ray_spawner`; plain Python here, so importing it costs nothing).

The actor receives the launch order through Ray (the run spec's text, CURVE keys included, travels with it, never
a shared path), writes the spec privately on its node (a 0700 directory, a 0600 file) and starts the same
``python -m`` worker a local run starts: pinned to the placement's cores that exist on this node and to the GPUs
Ray gave the actor, its ``tcp`` inbox (``server.transport: tcp``) bound on this node's address. It answers for
the worker: its exit status (:meth:`WorkerHost.wait_exit` returns when it exits), its log tail, SIGTERM and
SIGKILL. The worker dies with the actor (it asks Linux for SIGTERM when its parent goes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from trserve.cluster.handles import LOG_TAIL_LINES, LaunchOrder
from trserve.cluster.local import log_tail, start_worker, write_private
from trserve.runtime.endpoints import BIND_HOST_ENV
from trserve.runtime.placement import Placement, available_cpus


def node_placement(placement: Placement, node_cpus: list[int], gpu_ids: list[str]) -> Placement:
    """``placement`` on this node: its cores that the node has (all the node's cores if none is), and the GPUs Ray
    assigned to the actor in place of the driver's placeholder ids."""
    cpus = tuple(c for c in placement.cpus if c in node_cpus) or tuple(node_cpus)
    gpus = tuple(int(g) for g in gpu_ids) if placement.gpus is not None else None
    return replace(placement, cpus=cpus, gpus=gpus)


class WorkerHost:
    """One worker process of run ``run_id`` on this node; its files live in ``$TMPDIR/<run_id>/``."""

    def __init__(self, run_id: str) -> None:
        self.dir = Path(tempfile.gettempdir()) / run_id
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.is_started = asyncio.Event()  # set once start has run: Ray may run an async actor's calls out of order
        self.run_json: Path | None = None
        self.log_path: Path | None = None

    async def start(self, order: LaunchOrder) -> dict[str, Any]:
        """Start the worker; returns where it runs: ``pid``, ``host_pid`` (this actor), ``node_id``, ``node_ip``,
        ``log`` (its log file on this node)."""
        import ray

        try:
            self.run_json = self.dir / f"run-{order.index}-g{order.generation}.json"
            write_private(self.run_json, order.run_json)
            self.log_path = self.dir / f"{order.name}.log"
            gpu_ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
            placement = node_placement(order.placement, available_cpus(), gpu_ids)
            # On tcp the worker binds its inbox on this node's address, which it reports in Ready.
            env = {**os.environ, **placement.environment(), BIND_HOST_ENV: ray.util.get_node_ip_address()}
            self.process = start_worker(replace(order, placement=placement), self.run_json, self.log_path, env)
        finally:
            self.is_started.set()
        return {
            "pid": self.process.pid,
            "host_pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "log": str(self.log_path),
            "cpus": list(placement.cpus),
        }

    async def wait_exit(self) -> int:
        """Return the worker's exit status once it has exited."""
        await self.is_started.wait()
        if self.process is None:
            raise RuntimeError("the worker was never started (start failed)")
        while self.process.poll() is None:
            await asyncio.sleep(0.1)
        return self.process.returncode

    async def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    async def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    async def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines) if self.log_path is not None else "(not started)"

    async def close(self) -> None:
        """Kill the worker if it still runs and delete its run spec (the log stays, as a local run's does)."""
        await self.kill()
        if self.run_json is not None:
            with contextlib.suppress(OSError):
                self.run_json.unlink()
