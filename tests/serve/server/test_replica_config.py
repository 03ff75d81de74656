"""``replicas:`` in the serve config: validation names the field, each replica gets its own cores or GPUs, the
process table names the workers, and too few cores for real engines is one line at the CLI (exit 2)."""

import asyncio
import os
import subprocess
import sys

import pytest
import yaml
from pydantic import ValidationError

from tests.serve.engine_support import model_dirs
from tests.serve.server_fixtures import server_config
from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trserve.crossval.harness import crossval_server
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.placement import place_models, place_processes
from trserve.runtime.runspec import RunSpec
from trserve.server.serve import worker_specs

SMALL, LARGE = {"name": "small", "path": "/x"}, {"name": "large", "path": "/y"}


def make(small=None, large=None, **kw):
    return ServeConfig.model_validate({"models": [{**SMALL, **(small or {})}, {**LARGE, **(large or {})}], **kw})


@pytest.mark.parametrize(
    ("small", "kw", "words"),
    [
        ({"replicas": 0}, {}, "greater than or equal to 1"),
        ({"replicas": 2, "placement": {"cpus": [3]}}, {}, "1 core(s) for 2 replicas"),
        ({"replicas": 2, "placement": {"gpus": [0, 1, 2], "tensor_parallel_size": 2}}, {}, "need 4"),
        ({"replicas": 2}, {"mode": "lockstep"}, "need mode: routed"),
        ({"name": "large-r1"}, {}, "clash"),
        ({"placement": {"gpus": [1, 1]}}, {}, "twice"),
    ],
)
def test_bad_replica_settings_name_the_problem(small, kw, words):
    large = {"replicas": 2} if small.get("name") == "large-r1" else None
    with pytest.raises(ValidationError) as info:
        make(small, large, **kw)
    assert words in str(info.value)


def test_each_replica_gets_its_share_of_the_models_cores_and_gpus():
    cfg = make({"replicas": 2, "placement": {"cpus": [0, 1, 2, 3]}},
               {"replicas": 2, "placement": {"gpus": [4, 5, 6, 7], "tensor_parallel_size": 2}})  # fmt: skip
    places = place_processes(list(cfg.models), "vllm", cpus=list(range(8)))
    assert [p.cpus for p in places[:2]] == [(0, 1), (2, 3)]
    assert [p.gpus for p in places[2:]] == [(4, 5), (6, 7)]
    assert [p.cpus for p in places[2:]] == [(4, 5), (6, 7)]  # the free cores, split among the large replicas
    assert places[3].environment()["CUDA_VISIBLE_DEVICES"] == "6,7"


def test_one_replica_each_places_as_before():
    cfg = make()
    assert place_processes(list(cfg.models), "vllm", cpus=[0, 1, 2, 3]) == place_models(list(cfg.models), [0, 1, 2, 3])


def test_real_engines_need_a_core_per_process_stand_ins_may_share():
    cfg = make({"replicas": 4})
    with pytest.raises(ConfigError, match="not enough cores: 5 processes"):
        place_processes(list(cfg.models), "vllm", cpus=[0, 1])
    shared = place_processes(list(cfg.models), "emulated", cpus=[0, 1])
    assert len(shared) == 5 and all(len(p.cpus) == 1 for p in shared)


def test_the_process_table_names_workers_and_their_models(tmp_path):
    cfg = make({"replicas": 2})
    places = place_processes(list(cfg.models), "hash", cpus=[0, 1, 2])
    workers = worker_specs(cfg, places)
    assert [(w.index, w.name) for w in workers] == [(0, "small-r0"), (1, "small-r1"), (2, "large")]
    spec = RunSpec(cfg, ("/x", "/y"), (1, 1), tuple(places), Endpoints(str(tmp_path), 3, (0, 0, 0)))
    assert spec.table.procs == ((0, 0), (0, 1), (1, 0))


def test_too_few_cores_for_real_replicas_is_one_line_and_exit_2(tmp_path):
    config = server_config(model_dirs(), backend="vllm")
    config["models"][1]["replicas"] = len(os.sched_getaffinity(0)) + 1  # one more process than there are cores
    path = tmp_path / "replicas.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "tokenrouter", "serve", "--config", str(path), "--port", "0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "not enough cores" in lines[0]


def test_crossval_refuses_replicas_before_starting_anything():
    async def enter() -> None:
        async with crossval_server(make({"replicas": 2})):
            raise AssertionError("crossval started with replicas")

    with pytest.raises(ConfigError, match="one replica of each model"):
        asyncio.run(enter())
