"""Starting, watching, restarting and stopping the worker processes of one server run.

Each worker is a fresh interpreter (``python -m MODULE RUN_JSON INDEX``) whose placement is fixed before it
starts: CPU affinity in the child before exec, and the environment vLLM reads at import. A spawner starts it,
on this machine (:class:`trserve.cluster.local.LocalSpawner`, the default) or on a Ray node
(:class:`trserve.cluster.ray_spawner.RaySpawner`); either way the launcher sees a
:class:`trserve.cluster.handles.WorkerProcess`. A worker that exits before it reports ready stops the whole launch
with the tail of its log.

Wiring (:mod:`trserve.runtime.endpoints`): a worker's run spec names every inbox bound so far (the front end's
first); it binds its own and reports it in ``Ready``. Once all are ready the launcher tells each worker, by
``Rewire``, every peer address its spec did not have (all of them on ``tcp``; none on ``unix`` or ``ipc``, whose socket
files are known in advance); a restarted worker's new address reaches its peers the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from trserve.cluster.handles import ClusterError, LaunchOrder, Spawner, WorkerProcess
from trserve.cluster.local import LocalSpawner, log_tail
from trserve.config import RestartConfig
from trserve.frontend.book import FrontEnd
from trserve.frontend.metrics import Metrics
from trserve.frontend.recovery import Recovery
from trserve.runtime import refusal
from trserve.runtime.messages import Ready, Rewire, Shutdown
from trserve.runtime.placement import Placement
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND

__all__ = ["LaunchError", "Launcher", "WorkerSpec", "log_tail"]

log = logging.getLogger(__name__)


class LaunchError(RuntimeError):
    """A worker process failed to start; the message carries its exit status and log tail."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker process: its index (inbox), display name, role (its entry point in
    :data:`trserve.entrypoints.WORKERS`) and devices."""

    index: int
    name: str
    role: str
    placement: Placement


@dataclass
class Worker:
    spec: WorkerSpec
    process: WorkerProcess | None = None
    generation: int = 0
    restarts: int = 0
    ready: asyncio.Future[Ready] | None = None
    #: The peer inboxes this worker knows (from its run spec, then each ``Rewire`` it was sent).
    told: dict[int, str] = field(default_factory=dict)


class Launcher:
    """Owns the worker processes of one run; ``frontend`` receives their Ready messages; ``spawner`` places them
    (default: this machine, logs and run specs in ``log_dir``)."""

    def __init__(
        self,
        spec: RunSpec,
        workers: list[WorkerSpec],
        log_dir: Path,
        frontend: FrontEnd,
        metrics: Metrics,
        restart: RestartConfig,
        spawner: Spawner | None = None,
    ) -> None:
        self.spec = replace(spec, endpoints=spec.endpoints.with_address(FRONTEND, frontend.mailbox.address))
        self.workers = [Worker(w) for w in workers]
        self.log_dir = log_dir
        self.frontend = frontend
        self.metrics = metrics
        self.restart = restart
        self.spawner: Spawner = spawner or LocalSpawner(log_dir)
        self.is_stopping = False
        self.recovery = Recovery(frontend, metrics, spec.config.server.stall_timeout_s)
        self._monitor: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.on_restarted: Callable[[int], None] | None = None

    def log_location(self, index: int) -> str:
        """Where worker ``index``'s log is (a path here, or a node and path on a cluster)."""
        worker = self.workers[index]
        return worker.process.log_location if worker.process else str(self.log_dir / f"{worker.spec.name}.log")

    def _spawn(self, worker: Worker) -> None:
        spec = worker.spec
        self.spec = replace(self.spec, endpoints=self.spec.endpoints.with_generation(spec.index, worker.generation))
        worker.told = dict(self.spec.endpoints.addresses)
        order = LaunchOrder(spec.index, spec.name, spec.role, spec.placement, worker.generation, self.spec.to_json())
        worker.process = self.spawner.spawn(order)
        # Registered before the worker can answer: a Ready that arrives while we wait for another worker is kept.
        worker.ready = asyncio.get_running_loop().create_future()
        self.frontend.ready_waiters[spec.index] = worker.ready
        self.frontend.disconnect(spec.index)  # the front end connects when the worker reports its address

    async def _await_ready(self, workers: list[Worker], timeout_s: float) -> list[Ready]:
        """Wait until every worker of ``workers`` is ready; the first to exit (or the timeout) raises at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        futures = [w.ready for w in workers if w.ready is not None]
        while not all(f.done() for f in futures):
            for worker in workers:
                code = worker.process.poll() if worker.process is not None else None
                if code is not None and not (worker.ready and worker.ready.done()):
                    self._raise_refusal(worker, code)
                    raise LaunchError(self._failure(worker, f"exited with status {code} before it was ready"))
            if loop.time() > deadline:
                late = next(w for w in workers if w.ready is not None and not w.ready.done())
                raise LaunchError(self._failure(late, f"was not ready after {timeout_s:.0f} s"))
            await asyncio.wait([f for f in futures if not f.done()], timeout=0.2)
        for worker in workers:
            self._record_address(worker)
        return [f.result() for f in futures]

    def _record_address(self, worker: Worker) -> None:
        """Note where a worker that reported ready listens (its ``Ready`` says)."""
        assert worker.ready is not None
        address = worker.ready.result().address
        if not address:
            raise LaunchError(self._failure(worker, "reported ready without its inbox address"))
        self.spec = replace(self.spec, endpoints=self.spec.endpoints.with_address(worker.spec.index, address))

    def _tell(self, worker: Worker, peer: int) -> None:
        """Send ``worker`` the current address of process ``peer`` unless it knows it already."""
        address = self.spec.endpoints.addresses.get(peer)
        if address is not None and worker.told.get(peer) != address and worker.spec.index not in self.frontend.down:
            self.frontend.send(worker.spec.index, Rewire(peer, address))
            worker.told[peer] = address

    def _wire(self, worker: Worker) -> None:
        """Tell ``worker`` every peer address it does not know yet."""
        for other in self.workers:
            if other is not worker:
                self._tell(worker, other.spec.index)

    def _raise_refusal(self, worker: Worker, code: int) -> None:
        """Raise the ConfigError a worker that exited with ``code`` announced, if it did (one line for the user)."""
        if code == refusal.EXIT_STATUS and worker.process is not None:
            error = refusal.find(worker.process.log_tail())
            if error is not None:
                raise error

    def _failure(self, worker: Worker, what: str) -> str:
        tail = worker.process.log_tail() if worker.process is not None else "(not started)"
        return f"worker {worker.spec.name!r} {what}; last lines of {self.log_location(worker.spec.index)}:\n{tail}"

    async def start_all(self, timeout_s: float) -> list[Ready]:
        """Start every worker and wait until all are ready; on any failure stop them all and raise."""
        try:
            self.spawner.reserve([(w.spec.name, w.spec.placement) for w in self.workers])
            for worker in self.workers:
                self._spawn(worker)
            readies = await self._await_ready(self.workers, timeout_s)
        except ClusterError as exc:
            await self.stop_all()
            raise LaunchError(str(exc)) from None
        except BaseException:
            await self.stop_all()
            raise
        for worker in self.workers:
            self._wire(worker)
        for w in self.workers:
            self.metrics.up.labels(w.spec.name).set(1)
        self._monitor = asyncio.get_running_loop().create_task(self._watch())
        self._watchdog = asyncio.get_running_loop().create_task(self.recovery.watch())
        return readies

    async def _watch(self) -> None:
        while not self.is_stopping:
            await asyncio.sleep(0.2)
            for worker in self.workers:
                proc = worker.process
                if proc is None or self.is_stopping or worker.spec.index in self.frontend.down:
                    continue
                code = proc.poll()
                if code is not None:
                    await self._on_death(worker, code)

    async def _on_death(self, worker: Worker, code: int) -> None:
        """Restart a dead worker while the budget lasts: its requests (and every other in flight) are suspended
        and resume once it is back (:mod:`trserve.frontend.recovery`); past the budget they fail (503)."""
        name, index = worker.spec.name, worker.spec.index
        log.error("model process %r exited unexpectedly (status %d); see %s", name, code, self.log_location(index))
        self.metrics.up.labels(name).set(0)
        if not self._may_restart(worker):
            why = f"{name!r} exited (status {code}); restarts disabled or used up; see {self.log_location(index)}"
            self.recovery.model_down(index, why, restarting=False)
            return
        self.recovery.model_down(index, f"{name!r} exited unexpectedly and is restarting", restarting=True)
        worker.restarts += 1
        worker.generation += 1
        self.metrics.restarts.labels(name).inc()
        try:
            self._spawn(worker)
            await self._await_ready([worker], self.spec.config.server.startup_timeout_s)
        except (LaunchError, ClusterError) as exc:
            log.error("%s", exc)
            why = f"{name!r} failed to restart; see {self.log_location(index)}"
            self.recovery.model_down(index, why, restarting=False)
            return
        for other in self.workers:  # peers drop their queue for the dead process and talk to the new one
            if other is not worker:
                other.told.pop(index, None)  # even at the same address: what it queued for the dead one goes
                self._tell(other, index)
        self._wire(worker)
        self.metrics.up.labels(name).set(1)
        log.info("worker %s restarted (generation %d); resuming its requests", name, worker.generation)
        self.recovery.model_up(index)

    def _may_restart(self, worker: Worker) -> bool:
        return self.restart.enabled and worker.restarts < self.restart.max_restarts

    async def stop_all(self, grace_s: float = 10.0) -> None:
        """Ask every worker to shut down, then terminate and finally kill what is left; release the spawner."""
        self.is_stopping = True
        for task in (self._monitor, self._watchdog):
            if task is not None:
                task.cancel()
        live = [w for w in self.workers if w.process is not None and w.process.poll() is None]
        for w in live:
            with contextlib.suppress(Exception):
                self.frontend.send(w.spec.index, Shutdown())
        await _wait_exit(live, grace_s)
        for w in live:
            if w.process is not None and w.process.poll() is None:
                w.process.terminate()
        await _wait_exit(live, 5.0)
        for w in live:
            if w.process is not None and w.process.poll() is None:
                w.process.kill()
                w.process.wait(10.0)
        self.spawner.close()


async def _wait_exit(workers: list[Worker], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(w.process is None or w.process.poll() is not None for w in workers):
            return
        await asyncio.sleep(0.1)
