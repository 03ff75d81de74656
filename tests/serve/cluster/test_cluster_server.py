"""``tokenrouter serve`` with its workers as Ray actors on the local two-node cluster, on hash and emulated
engines: the same answers as the single-machine server, each worker on the node its placement asked for (read
from Ray's actor table, not from our code), and a killed worker process or a killed actor costs latency, not
requests, as on one machine (tests/serve/server/test_restart.py)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.serve.cluster.conftest import LABEL, LocalCluster, actor_table
from tests.serve.server.test_restart import NUM_STREAMS, Run, streams
from tests.serve.server_fixtures import MODEL, Served, server_config, start_served

pytestmark = pytest.mark.serve

NUM_REQUESTS = 12
#: The actor of worker ``name`` at ``generation`` of a run (see trserve.cluster.ray_spawner.RaySpawner.spawn).
ACTOR_NAME = re.compile(r"^(tokenrouter-\w+)-(.+)-g(\d+)$")


def on_cluster(config: dict[str, Any], address: str, **cluster: Any) -> dict[str, Any]:
    return {**config, "cluster": {"address": address, **cluster}}


def emulated(config: dict[str, Any]) -> dict[str, Any]:
    models = [{**m, "emulated": {"latency_ms": 2.0}} for m in config["models"]]
    return {**config, "backend": "emulated", "models": models}


@pytest.fixture(scope="module")
def on_ray(tmp_path_factory, ray_cluster: LocalCluster, hash_server: Served) -> Iterator[Served]:
    """The hash server on the cluster: SPREAD, the large model pinned by label to node b, ``tcp`` inboxes (each
    worker binds on its node's address; CURVE keys reach it through Ray in the run spec)."""
    config = on_cluster(
        server_config(hash_server.model_dirs, backend="hash", transport="tcp"),
        ray_cluster.address,
        strategy="SPREAD",
        nodes={"large": {"labels": {LABEL: "b"}}},
    )
    yield from start_served(tmp_path_factory.mktemp("ray-hash"), config, hash_server.model_dirs)


@pytest.fixture(scope="module")
def emulated_on_ray(tmp_path_factory, ray_cluster: LocalCluster, hash_server: Served) -> Iterator[Served]:
    """The emulated engines on the cluster (PACK, the default; ``ipc`` inboxes)."""
    config = on_cluster(emulated(server_config(hash_server.model_dirs)), ray_cluster.address)
    yield from start_served(tmp_path_factory.mktemp("emulated-ray"), config, hash_server.model_dirs)


async def answers(server: Served) -> list[tuple[str, list[int]]]:
    """Routed, greedy answers (hand-offs keyed per request, so every server routes them alike)."""

    async def one(client, i: int) -> tuple[str, list[int]]:
        body = {"model": MODEL, "prompt": f"Question {i}: why is the sky blue?", "max_tokens": 24, "temperature": 0,
                "ignore_eos": True, "return_token_ids": True,
                "routing_extra": {"handoff_prob": 0.3, "decision_key": f"q-{i}"}}  # fmt: skip
        response = await client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        return choice["text"], choice["token_ids"]

    async with server.async_client() as client:
        return list(await asyncio.gather(*(one(client, i) for i in range(NUM_REQUESTS))))


def test_hash_answers_equal_the_single_machine_servers(on_ray: Served, hash_server: Served):
    got, want = asyncio.run(answers(on_ray)), asyncio.run(answers(hash_server))
    assert got == want and len({text for text, _ in got}) == NUM_REQUESTS


def test_emulated_answers_equal_the_single_machine_servers(emulated_on_ray: Served, hash_server: Served):
    # An emulated engine writes the hash engine's tokens, only slower (tests/serve/server/test_emulated_server.py),
    # so the single-machine hash server that the other tests share is the reference.
    assert asyncio.run(answers(emulated_on_ray)) == asyncio.run(answers(hash_server))


def actors_of(server: Served) -> dict[str, dict[str, Any]]:
    """The live actors hosting ``server``'s workers, by model name (Ray's actor table)."""
    pids = {w["pid"] for w in server.state()["workers"]}
    found = {}
    for actor in actor_table():
        match = ACTOR_NAME.match(actor["name"])
        children = {c.pid for c in psutil.Process(actor["pid"]).children()} if match else set()
        if match and children & pids:
            found[match.group(2)] = {**actor, "generation": int(match.group(3)), "worker_pid": (children & pids).pop()}
    return found


def test_workers_run_in_actors_on_the_nodes_asked_for(on_ray: Served, ray_cluster: LocalCluster):
    actors = actors_of(on_ray)
    assert set(actors) == {"large", "small"}  # every worker process is the child of one of the run's actors
    nodes = {name: ray_cluster.node_of(a["node_id"]) for name, a in actors.items()}
    assert nodes == {"large": "b", "small": "a"}  # pinned by label; SPREAD: the other node
    for actor in actors.values():  # each worker's tcp inbox listens on its node's address (Ray's node table)
        listening = {
            c.laddr.ip for c in psutil.Process(actor["worker_pid"]).net_connections("tcp") if c.status == "LISTEN"
        }
        assert listening == {ray_cluster.node_ips[actor["node_id"]]}


def _maps_raylet(pid: int) -> bool:
    return "_raylet" in Path(f"/proc/{pid}/maps").read_text()


def test_only_a_server_with_a_cluster_loads_ray(on_ray: Served, hash_server: Served):
    assert on_ray.process.process is not None and hash_server.process.process is not None
    assert _maps_raylet(on_ray.process.process.pid)  # a Ray driver: the check can see Ray
    local_pids = [hash_server.process.process.pid] + [w["pid"] for w in hash_server.state()["workers"]]
    assert not any(_maps_raylet(pid) for pid in local_pids)


def restarts(server: Served) -> dict[str, float]:
    with server.client() as client:
        text = client.get("/metrics").text
    found = re.findall(r'^tokenrouter_model_restarts_total\{model="(\w+)"\} ([0-9.]+)$', text, re.M)
    return {name: float(value) for name, value in found}


@pytest.fixture(scope="module")
def uninterrupted(on_ray: Served) -> Run:
    return asyncio.run(streams(on_ray))


@pytest.mark.parametrize(("victim", "what"), [("small", "worker"), ("large", "actor")])
def test_a_killed_worker_or_actor_costs_latency_not_requests(on_ray, uninterrupted, ray_cluster, victim, what):
    before = actors_of(on_ray)[victim]
    model = next(w["model"] for w in on_ray.state()["workers"] if w["pid"] == before["worker_pid"])
    run = asyncio.run(streams(on_ray, kill=(before["worker_pid" if what == "worker" else "pid"], model)))
    for got, want in zip(run.streams, uninterrupted.streams, strict=True):
        assert got.status == 200 and not got.errors, got.lines[-3:]
        assert got.text == want.text and got.completion_tokens == want.completion_tokens
    assert run.plain == uninterrupted.plain and run.late_status == 200
    assert restarts(on_ray)[victim] == 1.0
    after = actors_of(on_ray)[victim]
    assert after["generation"] == before["generation"] + 1 and after["worker_pid"] != before["worker_pid"]
    if what == "actor":  # a fresh actor, in the same bundle: still on the node the label asked for
        assert after["pid"] != before["pid"] and ray_cluster.node_of(after["node_id"]) == "b"
    assert len(run.streams) == NUM_STREAMS
