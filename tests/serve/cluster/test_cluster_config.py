"""``cluster:`` in the serve config and ``--ray-address``: validation with errors that name the field, the bundles
a config asks Ray for, and a worker's placement on its node (no Ray here)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from trserve.cluster.bundles import bundles_of, cluster_placements, label_selectors
from trserve.cluster.host import node_placement
from trserve.config import ServeConfig
from trserve.runtime.placement import Placement

TWO = [{"name": "small", "path": "/x"}, {"name": "large", "path": "/y"}]


def make(cluster: dict, **kw) -> ServeConfig:
    return ServeConfig.model_validate({"models": kw.pop("models", TWO), "cluster": cluster, **kw})


@pytest.mark.parametrize(
    ("cluster", "extra", "words"),
    [
        ({"backend": "slurm"}, {}, "cluster.backend"),
        ({"strategy": "SCATTER"}, {}, "cluster.strategy"),
        ({"nodes": {"huge": {"resources": {"big": 1}}}}, {}, "unknown models ['huge']"),
        ({"nodes": {"small": {"resources": {"CPU": 2}}}}, {}, "not CPU/GPU"),
        ({"nodes": {"small": {"resources": {"big": 0}}}}, {}, "> 0"),
        ({}, {"mode": "lockstep"}, "routed mode only"),
        ({"accelerator": "gpu"}, {"models": [{**TWO[0], "placement": {"gpus": [3]}}, TWO[1]]}, "Ray picks the GPUs"),
        ({}, {"models": [{**TWO[0], "placement": {"gpus": [3]}}, TWO[1]]}, "needs cluster.accelerator: gpu"),
        ({"address": ""}, {}, "cluster.address"),
        ({"surprise": 1}, {}, "surprise"),
    ],
)
def test_bad_cluster_settings_name_the_field(cluster, extra, words):
    with pytest.raises(ValidationError) as info:
        make(cluster, **extra)
    assert words in str(info.value)


def test_without_cluster_nothing_changes():
    assert ServeConfig.model_validate({"models": TWO}).cluster is None


def test_bundles_hold_each_workers_cores_gpus_and_pins():
    models = [
        {"name": "small", "path": "/x", "placement": {"cpus": [0, 1, 2, 3]}},
        {"name": "large", "path": "/y", "placement": {"cpus": [4], "tensor_parallel_size": 8}},
    ]
    nodes = {"large": {"labels": {"gpu-node": "b"}, "resources": {"big": 0.5}}}
    cfg = make({"accelerator": "gpu", "strategy": "SPREAD", "nodes": nodes}, models=models)
    placements = cluster_placements(cfg)
    workers = [(m.name, p) for m, p in zip(cfg.models, placements, strict=True)]
    assert bundles_of(cfg.cluster, workers) == [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 8.0, "big": 0.5}]
    assert label_selectors(cfg.cluster, workers) == [{}, {"gpu-node": "b"}]
    cpu_only = make({}, models=models[:1])
    assert bundles_of(cpu_only.cluster, [("small", cluster_placements(cpu_only)[0])]) == [{"CPU": 4.0}]
    assert label_selectors(cpu_only.cluster, [("small", cluster_placements(cpu_only)[0])]) is None


def test_every_replica_of_a_model_shares_its_pins():
    cfg = make({"nodes": {"small": {"resources": {"big": 1}}}})
    workers = [(name, Placement(cpus=(0,))) for name in ("small-r0", "small-r1", "large", "smallish-r0")]
    assert [b.get("big") for b in bundles_of(cfg.cluster, workers)] == [1, 1, None, None]


def test_a_worker_is_pinned_to_its_cores_on_its_node_and_to_the_gpus_ray_gave():
    placement = Placement(cpus=(2, 3), gpus=(0, 1))
    assert node_placement(placement, [0, 1, 2, 3], ["5", "7"]) == Placement(cpus=(2, 3), gpus=(5, 7))
    assert node_placement(placement, [0, 1], ["5", "7"]).cpus == (0, 1)  # a smaller node: all of its cores
    assert node_placement(Placement(cpus=(1,)), [0, 1], []) == Placement(cpus=(1,))
    env = node_placement(placement, [2, 3], ["5", "7"]).environment()
    assert env["CUDA_VISIBLE_DEVICES"] == "5,7" and env["OMP_NUM_THREADS"] == "2"


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tokenrouter", "serve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_ray_address_option_sets_the_cluster(tmp_path):
    path = tmp_path / "c.yaml"
    config = {"backend": "hash", "models": TWO, "cluster": {"strategy": "SPREAD", "address": "auto"}}
    path.write_text(yaml.safe_dump(config))
    result = _serve("--config", str(path), "--ray-address", "10.0.0.5:6379", "--print-config")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)["cluster"]
    assert printed["address"] == "10.0.0.5:6379" and printed["strategy"] == "SPREAD"  # the rest stays
    config.pop("cluster")
    path.write_text(yaml.safe_dump(config))
    printed = yaml.safe_load(_serve("--config", str(path), "--ray-address", "auto", "--print-config").stdout)
    assert printed["cluster"]["backend"] == "ray" and printed["cluster"]["strategy"] == "PACK"


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (("--ray-address", ""), "error: --ray-address: cluster.address: String should have at least 1 character"),
        (("--port", "70000"), "error: --port: server.port: Input should be less than or equal to 65535"),
    ],
)
def test_a_flag_the_config_refuses_is_named_as_typed(tmp_path, flags, line):
    """README's 'error: --option: problem': the flag, not only the config field it set."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"backend": "hash", "models": TWO}))
    bad = _serve("--config", str(path), *flags, "--print-config")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [line]


def test_shipped_ray_local_config_is_valid_and_on_ray():
    from trserve.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / "ray-local.yaml")
    assert cfg.cluster is not None and cfg.cluster.address == "auto" and cfg.cluster.strategy == "PACK"


def test_the_two_node_config_in_the_docs_asks_for_what_the_docs_say():
    text = (Path(__file__).resolve().parents[3] / "docs" / "serving.md").read_text()
    block = text[text.index("    backend: vllm\n    models:") : text.index("Bundles: small")]
    cfg = ServeConfig.model_validate(yaml.safe_load("\n".join(line[4:] for line in block.splitlines())))
    workers = [(m.name, p) for m, p in zip(cfg.models, cluster_placements(cfg), strict=True)]
    assert bundles_of(cfg.cluster, workers) == [{"CPU": 4, "GPU": 1}, {"CPU": 8, "GPU": 8}]
    assert "Bundles: small `{CPU: 4, GPU: 1}` on B, large `{CPU: 8, GPU: 8}` on A" in text
    assert label_selectors(cfg.cluster, workers) == [{"tokenrouter/node": "b"}, {"tokenrouter/node": "a"}]


def test_each_replica_gets_a_bundle_of_its_own():
    models = [{"name": "small", "path": "/x", "replicas": 3, "placement": {"cpus": [0, 1, 2, 3, 4, 5]}},
              {"name": "large", "path": "/y", "placement": {"cpus": [6, 7], "tensor_parallel_size": 2}}]  # fmt: skip
    cfg = make({"accelerator": "gpu", "nodes": {"small": {"resources": {"small_node": 1}}}}, models=models)
    names = [m.process_name(r) for m in cfg.models for r in range(m.replicas)]
    bundles = bundles_of(cfg.cluster, list(zip(names, cluster_placements(cfg), strict=True)))
    assert names == ["small-r0", "small-r1", "small-r2", "large"]
    assert bundles == [{"CPU": 2, "GPU": 1, "small_node": 1}] * 3 + [{"CPU": 2, "GPU": 2}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        (True, "error: --ray-address: cluster.address: no Ray cluster answers at"),
        (False, "error: cluster.address: no Ray cluster answers at"),
    ],
)
def test_no_ray_cluster_at_the_address_is_one_line_and_exit_2_before_anything_starts(tmp_path, flag, named):
    """As sweep and plan answer it: no 'starting workers' line, no worker, no Ray retrying for minutes."""
    dead = f"127.0.0.1:{_free_port()}"  # nothing listens there
    path = tmp_path / "c.yaml"  # emulated engines: the run would get as far as starting its workers
    emulated = yaml.safe_load((Path(__file__).resolve().parents[3] / "configs" / "emulated-r2r-a100.yaml").read_text())
    path.write_text(yaml.safe_dump({**emulated, **({} if flag else {"cluster": {"address": dead}})}))
    result = _serve("--config", str(path), "--port", str(_free_port()), *(["--ray-address", dead] if flag else []))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"{named} {dead} (Connection refused)"]
