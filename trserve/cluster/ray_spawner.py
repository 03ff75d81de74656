"""Worker processes as Ray actors: one placement group per run with a bundle per worker, one
:class:`trserve.cluster.host.WorkerHost` actor per worker scheduled into its bundle.

What goes through Ray: the run spec (handed to the actor with its launch order), where each worker runs, its
liveness (a pending ``wait_exit`` call that resolves with its exit status, or fails when the actor or its node
dies), its log tail, and stop/kill. Tokens and hand-offs never do: they stay on ZeroMQ. The launcher restarts a
dead worker per ``server.restart``; a restart (the worker exited or its actor died) gets a fresh actor in the same
bundle (actors are not restarted by Ray: ``max_restarts=0``), so one path covers both. Ray is imported only here,
and only when a spawner is used.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import Any

from trcore.errors import ConfigError
from trserve.cluster.bundles import Bundle, bundles_of, describe, label_selectors
from trserve.cluster.handles import LOG_TAIL_LINES, ClusterError, LaunchOrder
from trserve.cluster.host import WorkerHost
from trserve.model_config import ClusterConfig
from trserve.runtime.placement import Placement

log = logging.getLogger(__name__)

#: The exit status reported for a worker whose actor (or node) died under it.
ACTOR_LOST = -1
#: The serve config's field of the cluster's address.
FIELD = "cluster.address"
#: How long a call that should answer at once (log tail, start-up facts) may take.
CALL_TIMEOUT_S = 30.0


def _unanswered(address: str) -> str | None:
    """Why nothing answers at ``host:port`` (None: something listens there, or ``address`` is not a host:port)."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdecimal():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _check_reachable(address: str) -> None:
    """Fail at once on a ``host:port`` nobody listens on (Ray itself would retry for minutes)."""
    reason = None if address == "auto" else _unanswered(address)
    if reason is not None:
        raise ClusterError(
            f"cluster.address {address!r}: no Ray cluster answers there ({reason}); "
            "start one with `ray start --head` or set cluster.address / --ray-address"
        )


def check_address(address: str) -> None:
    """ConfigError naming ``cluster.address`` when no Ray cluster answers at it (``auto``: when none is found, as
    ``ray.init`` finds one), for ``serve`` to refuse before anything starts. A client address (``ray://``) is left
    to Ray."""
    found = ""
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address_or_die  # how ray.init reads 'auto'

        try:
            address, found = canonicalize_bootstrap_address_or_die("auto"), ", found by 'auto'"
        except (ConnectionError, ValueError):
            raise ConfigError(FIELD, "auto: no running Ray cluster found (`ray start --head` starts one)") from None
    reason = _unanswered(address)
    if reason is not None:
        raise ConfigError(FIELD, f"no Ray cluster answers at {address}{found} ({reason})")


def connect(cluster: ClusterConfig) -> bool:
    """Join the cluster at ``cluster.address`` (True if this call did: the spawner then disconnects at close)."""
    import ray

    _check_reachable(cluster.address)
    if ray.is_initialized():
        return False
    try:
        ray.init(address=cluster.address, namespace=cluster.namespace, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"cluster.address {cluster.address!r}: cannot join a Ray cluster there ({first}); "
            "start one with `ray start --head` or set cluster.address / --ray-address"
        ) from None
    return True


class RayProcess:
    """A worker process hosted by a Ray actor (the :class:`trserve.cluster.handles.WorkerProcess` of a cluster)."""

    def __init__(self, actor: Any, started: Any, name: str) -> None:
        self.actor, self.name = actor, name
        self._started = started
        self._exit = actor.wait_exit.remote()
        self._code: int | None = None
        self._info: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        """Where the worker runs (see :meth:`trserve.cluster.host.WorkerHost.start`); waits for its start."""
        import ray

        if self._info is None:
            self._info = ray.get(self._started, timeout=CALL_TIMEOUT_S)
        return self._info

    @property
    def pid(self) -> int:
        return int(self.info()["pid"])

    @property
    def log_location(self) -> str:
        try:
            info = self.info()
        except Exception:
            return f"the Ray actor of {self.name!r} (it did not start)"
        return f"node {info['node_ip']} ({info['node_id'][:12]}): {info['log']}"

    def poll(self) -> int | None:
        import ray

        if self._code is None and ray.wait([self._exit], timeout=0)[0]:
            try:
                self._code = int(ray.get(self._exit))
            except ray.exceptions.RayError as exc:
                log.error("the Ray actor of %r is gone: %s", self.name, str(exc).strip().splitlines()[0])
                self._code = ACTOR_LOST
        return self._code

    def terminate(self) -> None:
        self.actor.terminate.remote()

    def kill(self) -> None:
        self.actor.kill.remote()

    def wait(self, timeout_s: float | None = None) -> int | None:
        import ray

        ray.wait([self._exit], timeout=timeout_s)
        return self.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        import ray

        try:
            return str(ray.get(self.actor.log_tail.remote(lines), timeout=CALL_TIMEOUT_S))
        except (ray.exceptions.RayError, TimeoutError) as exc:
            return f"(no log: the Ray actor of {self.name!r} cannot answer: {type(exc).__name__})"


class RaySpawner:
    """Places the workers of run ``run_id`` on the Ray cluster ``cluster`` describes."""

    def __init__(self, cluster: ClusterConfig, run_id: str) -> None:
        self.cluster, self.run_id = cluster, run_id
        self.group: Any = None
        self.bundles: list[Bundle] = []
        self.actors: dict[int, Any] = {}
        self._owns_connection = False

    def reserve(self, workers: list[tuple[str, Placement]]) -> None:
        """Join the cluster and wait until the placement group holds a bundle for every worker."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self._owns_connection = connect(self.cluster)
        self.bundles = bundles_of(self.cluster, workers)
        group = placement_group(
            self.bundles,
            strategy=self.cluster.strategy,
            name=self.run_id,
            bundle_label_selector=label_selectors(self.cluster, workers),
        )
        if not ray.wait([group.ready()], timeout=self.cluster.placement_timeout_s)[0]:
            remove_placement_group(group)
            raise ClusterError(
                f"Ray could not place {describe(self.bundles, [n for n, _ in workers])} with strategy "
                f"{self.cluster.strategy} within {self.cluster.placement_timeout_s:g} s "
                f"(cluster.placement_timeout_s); the cluster has {_resources(ray.cluster_resources())}"
            )
        self.group = group

    def spawn(self, order: LaunchOrder) -> RayProcess:
        """A fresh actor in bundle ``order.index`` (the previous one of that index, if any, is killed first)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self.group is None:
            raise ClusterError("RaySpawner.spawn before reserve")
        old = self.actors.pop(order.index, None)
        if old is not None:
            ray.kill(old, no_restart=True)
        bundle = self.bundles[order.index]
        custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
        actor = (
            ray.remote(WorkerHost)
            .options(
                name=f"{self.run_id}-{order.name}-g{order.generation}",
                num_cpus=bundle["CPU"],
                num_gpus=bundle.get("GPU", 0),
                resources=custom,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, order.index),
            )
            .remote(self.run_id)
        )
        self.actors[order.index] = actor
        return RayProcess(actor, actor.start.remote(order), order.name)

    def close(self) -> None:
        """Kill every actor (and so its worker), remove the placement group, leave the cluster if we joined it."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if not ray.is_initialized():
            return
        closing = [actor.close.remote() for actor in self.actors.values()]
        ray.wait(closing, num_returns=len(closing), timeout=10.0)
        for actor in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
        if self._owns_connection:
            ray.shutdown()
            self._owns_connection = False


def _resources(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in sorted(resources.items()) if not k.startswith(("node:", "memory", "object_store"))}
    return ", ".join(f"{k}: {v:g}" for k, v in shown.items()) or "no resources"
