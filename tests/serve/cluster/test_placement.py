"""Placement groups on the local two-node cluster: where Ray puts each worker's bundle under PACK, SPREAD and
explicit node pins, read back from Ray's own placement group table; and a group that can never be placed is a
clear error, not a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.serve.cluster.conftest import LocalCluster
from trserve.cluster.handles import ClusterError
from trserve.cluster.ray_spawner import RaySpawner, connect
from trserve.model_config import ClusterConfig
from trserve.runtime.placement import Placement

ONE_CORE = Placement(cpus=(0,))
TWO = [("large", ONE_CORE), ("small", ONE_CORE)]


def wait_idle(timeout_s: float = 120.0) -> None:
    """Until every CPU of the cluster is free again (actors of servers stopped before free theirs late)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, f"the cluster stays busy: {ray.available_resources()}"
        time.sleep(0.5)


@pytest.fixture
def spawners(ray_cluster: LocalCluster) -> Iterator[list[RaySpawner]]:
    wait_idle()  # where Ray puts a bundle depends on what is free
    made: list[RaySpawner] = []
    yield made
    for spawner in made:
        spawner.close()


def placed(spawners: list[RaySpawner], cluster: LocalCluster, workers, run_id: str, **settings) -> list[str]:
    """Reserve a placement group for ``workers``; the name of the node holding each bundle, per Ray's table."""
    import ray

    spawner = RaySpawner(ClusterConfig(address=cluster.address, **settings), run_id)
    spawners.append(spawner)
    spawner.reserve(workers)
    table = ray.util.placement_group_table(spawner.group)
    assert table["state"] == "CREATED"
    return [cluster.node_of(table["bundles_to_node_id"][i]) for i in range(len(workers))]


def test_pack_puts_both_workers_on_one_node(spawners, ray_cluster):
    nodes = placed(spawners, ray_cluster, TWO, "t-pack")
    assert len(set(nodes)) == 1


def test_spread_puts_them_on_different_nodes(spawners, ray_cluster):
    nodes = placed(spawners, ray_cluster, TWO, "t-spread", strategy="SPREAD")
    assert len(set(nodes)) == 2


def test_node_labels_and_resources_pin_a_model(spawners, ray_cluster):
    pins = {"large": {"labels": {"tokenrouter-test-node": "b"}}, "small": {"resources": {"node_a": 0.5}}}
    assert placed(spawners, ray_cluster, TWO, "t-pins", nodes=pins) == ["b", "a"]
    flipped = {"large": {"resources": {"node_a": 0.5}}, "small": {"labels": {"tokenrouter-test-node": "b"}}}
    assert placed(spawners, ray_cluster, TWO, "t-flipped", nodes=flipped) == ["a", "b"]


def test_a_group_that_cannot_be_placed_is_a_clear_error(spawners, ray_cluster):
    import ray

    workers = [(f"w{i}", ONE_CORE) for i in range(3)]  # three distinct nodes asked of two
    with pytest.raises(ClusterError) as info:
        placed(spawners, ray_cluster, workers, "t-never", strategy="STRICT_SPREAD", placement_timeout_s=3)
    message = str(info.value)
    assert (
        "w0 {CPU: 1}" in message and "STRICT_SPREAD within 3 s" in message and "CPU: 4" in message
    )  # what the cluster has
    assert not any(
        g["name"] == "t-never" and g["state"] != "REMOVED" for g in ray.util.placement_group_table().values()
    )


def test_no_cluster_at_the_address_is_a_clear_error_at_once():
    with pytest.raises(ClusterError, match=r"cluster.address '127.0.0.1:9': no Ray cluster answers there .*ray start"):
        connect(ClusterConfig(address="127.0.0.1:9"))  # the discard port: nothing listens
