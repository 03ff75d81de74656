"""Real vLLM CPU engines as Ray actors on the local two-node cluster (the prepared local pair, float32, greedy):
one engine per node (SPREAD), and the same routed answers, token for token, as the single-machine server that the
other serve tests share. Run it under ``flock /tmp/tokenrouter-measure.lock`` like every real-engine test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.serve.cluster.conftest import LocalCluster
from tests.serve.cluster.test_cluster_server import actors_of, answers, on_cluster
from tests.serve.server_fixtures import Served, server_config, start_served

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module")
def vllm_on_ray(tmp_path_factory, ray_cluster: LocalCluster, vllm_server: Served) -> Iterator[Served]:
    dirs = vllm_server.model_dirs
    config = on_cluster(server_config(dirs), ray_cluster.address, strategy="SPREAD")
    yield from start_served(tmp_path_factory.mktemp("ray-vllm"), config, dirs)


def test_vllm_engines_on_two_nodes_answer_as_on_one_machine(vllm_on_ray: Served, vllm_server: Served, ray_cluster):
    nodes = {name: ray_cluster.node_of(actor["node_id"]) for name, actor in actors_of(vllm_on_ray).items()}
    assert set(nodes) == {"large", "small"} and nodes["large"] != nodes["small"]
    got, want = asyncio.run(answers(vllm_on_ray)), asyncio.run(answers(vllm_server))
    assert got == want
    assert len({text for text, _ in want}) > 1  # real, prompt-dependent answers
