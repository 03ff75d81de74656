"""A real local Ray cluster for the cluster tests: two nodes on this machine (``ray.cluster_utils.Cluster``),
started once per session in its own temp dir and on free ports, torn down at the end.

Each node carries a custom resource and a label naming it, so a test can pin a worker and see where it landed:
``a`` (the head) and ``b``, 2 CPUs each (two servers of two workers fit at once). The test process is a Ray driver
of the cluster (it reads the actor table); servers under test join it as drivers of their own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

NODES = {"a": 2, "b": 2}  # node name -> CPUs
LABEL = "tokenrouter-test-node"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_args(name: str, head: bool) -> dict[str, Any]:
    args: dict[str, Any] = {
        "num_cpus": NODES[name],
        "resources": {f"node_{name}": 1.0},
        "labels": {LABEL: name},
        "include_dashboard": False,
        "object_store_memory": 80 * 1024 * 1024,
        "metrics_export_port": _free_port(),
    }
    if head:  # never the default ports: another cluster may run on this machine
        args.update(gcs_server_port=_free_port(), dashboard_agent_listen_port=_free_port())
        args.update(ray_client_server_port=_free_port())
    return args


@dataclass
class LocalCluster:
    """The running cluster: its address, each node's Ray node id by name and its IP address by node id."""

    address: str
    node_ids: dict[str, str]
    node_ips: dict[str, str]

    def node_of(self, node_id: str) -> str:
        return next(name for name, nid in self.node_ids.items() if nid == node_id)


def _describe(address: str) -> LocalCluster:
    import ray

    ids, ips = {}, {}
    for node in ray.nodes():
        names = [k[len("node_") :] for k in node["Resources"] if k.startswith("node_") and k[5:] in NODES]
        if node["Alive"] and names:
            ids[names[0]] = node["NodeID"]
            ips[node["NodeID"]] = node["NodeManagerAddress"]
    return LocalCluster(address, ids, ips)


def _start(tmp: str, attempts: int = 3) -> Any:
    """The nodes, in ``tmp``. Ray gives a node 30 s to register, which a loaded machine can miss: then the
    processes of that try (our children running under ``tmp``) are killed and it tries again."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_once(tmp)
        except Exception:
            if attempt == attempts:
                raise
            _kill_children_under(tmp)
    raise AssertionError("unreachable")


def _kill_children_under(tmp: str) -> None:
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if tmp in " ".join(child.cmdline()):
                child.kill()


def _start_once(tmp: str) -> Any:
    """The nodes; they (and the workers they start) keep ``tmp`` as their temp dir."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "TMPDIR")}
    os.environ.update(RAY_TMPDIR=tmp, TMPDIR=tmp)
    try:
        cluster = Cluster(initialize_head=True, head_node_args=node_args("a", head=True))
        cluster.add_node(**node_args("b", head=False))
        cluster.wait_for_nodes()
        return cluster
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="package")  # torn down when the cluster tests end: other modules start their own
def ray_cluster() -> Iterator[LocalCluster]:
    import ray

    tmp = tempfile.mkdtemp(prefix="trray-", dir="/tmp")  # short: Ray's socket paths live under it
    cluster = None
    try:
        cluster = _start(tmp)
        ray.init(address=cluster.address, namespace="tokenrouter-tests", log_to_driver=False)
        yield _describe(cluster.address)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def actor_table() -> list[dict[str, Any]]:
    """Ray's record (GCS) of every live actor: name, node id, pid."""
    import ray

    rows = ray._private.state.actors().values()
    return [
        {"name": r.get("Name", ""), "node_id": r["Address"]["NodeID"], "pid": r["Pid"]}
        for r in rows
        if r["State"] == "ALIVE"
    ]
