"""Simulator jobs as Ray tasks: ``tokenrouter sweep`` and ``tokenrouter plan`` with ``--ray-address`` spread their
points over a Ray cluster (docs/simulator.md).

The only ``trsim`` module that imports Ray (tests/test_layers.py), and nothing imports it unless the flag is
given. Each job is one task needing one CPU. Tasks go round the alive nodes in proportion to their CPUs, each with
soft node affinity: Ray's SPREAD is best effort and once put all six tasks of a two-node test on one node, while a
soft affinity still lets Ray place a task elsewhere when its node is gone (and retry a task whose node died). Every
node must have the same TokenRouter installed: tasks name their functions by module.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ray
from ray._private.services import canonicalize_bootstrap_address_or_die  # how ray.init reads 'auto'
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from trcore import ConfigError
from trsim.parallel import Job

OPTION = "--ray-address"


@ray.remote(num_cpus=1)
def _run_job(fn: Callable[..., Any], job: Job) -> tuple[Any, str]:
    return fn(*job), ray.get_runtime_context().get_node_id()


class RayRunner:
    """Runs jobs as tasks on the cluster this process is connected to; counts the tasks each node ran."""

    def __init__(self, address: str) -> None:
        self.address = address
        alive = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeID"])
        self.nodes = [n["NodeID"] for n in alive]
        self.cpus = int(ray.cluster_resources().get("CPU", 0))
        #: One entry per CPU of each alive node, interleaved: job k goes to ``slots[k % len(slots)]``.
        self.slots = node_slots({n["NodeID"]: int(n.get("Resources", {}).get("CPU", 0)) for n in alive})
        self.tasks_per_node: Counter[str] = Counter()

    def _submit(self, k: int, fn: Callable[..., Any], job: Job) -> Any:
        if not self.slots:
            return _run_job.remote(fn, job)
        where = NodeAffinitySchedulingStrategy(self.slots[k % len(self.slots)], soft=True)
        return _run_job.options(scheduling_strategy=where).remote(fn, job)

    def imap(self, fn: Callable[..., Any], jobs: Sequence[Job]) -> Iterator[tuple[int, Any]]:
        index = {self._submit(k, fn, job): k for k, job in enumerate(jobs)}
        pending = list(index)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            result, node = ray.get(done[0])
            self.tasks_per_node[node] += 1
            yield index[done[0]], result

    def describe(self) -> dict[str, Any]:
        return {"backend": "ray", "address": self.address, "nodes": self.nodes, "cpus": self.cpus,
                "tasks_per_node": dict(sorted(self.tasks_per_node.items()))}  # fmt: skip


def node_slots(cpus: dict[str, int]) -> list[str]:
    """Node ids, each as often as it has CPUs, taken round the nodes in turn: ``{a: 2, b: 1}`` gives
    ``[a, b, a]``."""
    slots, left = [], dict(cpus)
    while any(n > 0 for n in left.values()):
        for node in sorted(left):
            if left[node] > 0:
                slots.append(node)
                left[node] -= 1
    return slots


def cluster_address(address: str) -> str:
    """``host:port`` of the cluster's head: ``address`` itself, or for ``auto`` the cluster Ray finds
    (``RAY_ADDRESS``, else the last ``ray start`` on this machine). ConfigError when nothing answers there."""
    given = address
    if address == "auto":
        try:
            address = canonicalize_bootstrap_address_or_die("auto")
        except (ConnectionError, ValueError):
            raise ConfigError(OPTION, "auto: no running Ray cluster found (`ray start --head` starts one)") from None
    host, _, port = address.rpartition(":")
    if not host or not port.isdecimal() or not 0 < int(port) < 65536:
        raise ConfigError(OPTION, f"expected 'auto' or host:port, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        found = ", found by 'auto'" if given == "auto" else ""
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(OPTION, f"no Ray cluster answers at {address}{found} ({reason})") from None
    return address


@contextmanager
def connect(address: str) -> Iterator[RayRunner]:
    """Join the cluster at ``address`` ('auto' or host:port) for the duration of the block."""
    target = cluster_address(address)
    try:
        ray.init(address=target, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(OPTION, f"cannot join the Ray cluster at {target}: {first}") from None
    try:
        yield RayRunner(target)
    finally:
        ray.shutdown()
