"""`tokenrouter sweep` and `tokenrouter plan` with --ray-address: on a real two-node local Ray cluster the points
run on both nodes and give exactly the local run's numbers; bad addresses exit 2 with one line; without the flag
Ray is never imported."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from typer.testing import CliRunner

from tokenrouter.cli import app
from trsim.plan import PlanConfig, run_plan
from trsim.ray_jobs import connect, node_slots

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["sweep", "--concurrency", "3", "--tokens", "1000", "--workload", "short-reasoning"]  # 6 points
#: One routed placement, two jobs (the large model alone beside it would add its own: ``--no-large-alone``).
PLAN = ["plan", "--hardware", "h100-sxm", "--gpus", "1", "--models", "small=Qwen3-0.6B,large=Qwen3-4B",
        "--concurrency", "4", "--thresholds", "1,1", "--open-loop-top", "0", "--no-large-alone", "--json"]  # fmt: skip


def run(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@ray.remote(num_cpus=1)
def _node_id() -> str:
    return ray.get_runtime_context().get_node_id()


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    """Two nodes of one CPU each on this machine, with their own temp dir and GCS port; yields (address, the
    two node ids). Before yielding, one pinned task per node checks both nodes take work."""
    tmp = tempfile.mkdtemp(prefix="trsw", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = pytest.MonkeyPatch()
    env.setenv("RAY_TMPDIR", tmp)  # also keeps Cluster's 'current cluster' file out of /tmp/ray
    head_args = {"num_cpus": 1, "gcs_server_port": free_port(), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        nodes = {cluster.head_node.node_id, cluster.add_node(num_cpus=1).node_id}
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        pinned = [_node_id.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)) for n in nodes]
        assert set(ray.get([task.remote() for task in pinned])) == nodes
        ray.shutdown()
        yield cluster.address, nodes
    finally:
        ray.shutdown()
        cluster.shutdown()
        env.undo()
        shutil.rmtree(tmp, ignore_errors=True)


def without_wall_clock(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_s" and "per_wall" not in k} for row in rows]


def test_sweep_on_the_cluster_equals_the_local_sweep_and_uses_both_nodes(ray_cluster, tmp_path):
    address, nodes = ray_cluster
    assert run(*SWEEP, "--jobs", "1", "--out", tmp_path / "local").exit_code == 0
    result = run(*SWEEP, "--ray-address", address, "--out", tmp_path / "ray")
    assert result.exit_code == 0, result.output
    local = json.loads((tmp_path / "local" / "sweep.json").read_text())
    on_ray = json.loads((tmp_path / "ray" / "sweep.json").read_text())
    assert len(local["points"]) == 6  # every feasible threshold vector of two models at N = 3
    assert without_wall_clock(on_ray["points"]) == without_wall_clock(local["points"])
    runner = on_ray["runner"]
    assert runner["backend"] == "ray" and set(runner["nodes"]) == nodes and runner["cpus"] == 2
    assert set(runner["tasks_per_node"]) == nodes and sum(runner["tasks_per_node"].values()) == 6


def test_plan_on_the_cluster_found_by_auto_equals_the_local_plan(ray_cluster, monkeypatch):
    """Every stage (closed loop in the simulator, confirmation, open-loop bisection) through the runner that
    `plan --ray-address auto` opens; the library call, as the CLI's own plan runs 3 x 40k-token confirmations."""
    address, nodes = ray_cluster
    models = {"small": "Qwen3-0.6B", "large": "Qwen3-4B"}
    P, C = ((0.65, 0.35), (1.0, 0.0)), ((1.0, 0.0), (1.0, 0.0))
    cfg = PlanConfig("h100-sxm", 2, models, P, C, concurrencies=(4,), thresholds=((1, 1), (2, 1)), chain_max_n=2,
                     sim_tokens=1000, open_loop_top=1, open_run_s=3.0, bisection_steps=2)  # fmt: skip
    local = run_plan(cfg)
    monkeypatch.setenv("RAY_ADDRESS", address)  # what `--ray-address auto` reads first, as ray.init does
    with connect("auto") as runner:
        on_ray = run_plan(cfg, runner=runner)
    assert any(p["evaluator"] == "sim" for p in local["placements"])  # closed loop in the simulator
    assert any(p["max_rate_rps"] is not None for p in local["placements"])  # the open-loop stage ran
    for key in ("placements", "best", "config"):
        assert on_ray[key] == local[key]
    used = runner.describe()
    assert used["address"] == address and set(used["tasks_per_node"]) == nodes


def test_plan_command_on_the_cluster_prints_one_json_object(ray_cluster):
    """The CLI's plumbing (one placement: two jobs; the equality is the test above): stdout stays one JSON
    object, with where the jobs ran."""
    address, nodes = ray_cluster
    result = run(*PLAN, "--ray-address", address)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [p["label"] for p in plan["placements"]] == ["1x coloc tp1"]
    assert plan["placements"][0]["sim_throughput_tok_s"] > 0  # the confirmation ran
    runner = plan["runner"]
    assert runner["backend"] == "ray" and set(runner["nodes"]) == nodes and plan["workers"] == 2
    assert set(runner["tasks_per_node"]) <= nodes and sum(runner["tasks_per_node"].values()) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray-address", "127.0.0.1:{port}"], "error: --ray-address: no Ray cluster answers at 127.0.0.1:{port}"),
        (["--ray-address", "head-node"], "error: --ray-address: expected 'auto' or host:port, got 'head-node'"),
        (["--ray-address", "10.0.0.1:99999"], "error: --ray-address: expected 'auto' or host:port"),
        (["--ray-address", "10.0.0.1:²"], "error: --ray-address: expected 'auto' or host:port"),  # not int()'s digit
        (["--ray-address", "auto", "--jobs", "2"], "error: --jobs: local worker processes and --ray-address"),
        (["--jobs", "0"], "error: --jobs: must be >= 1, got 0"),
    ],
)
def test_bad_ray_addresses_exit_2_with_one_line(args, message, tmp_path):
    port = free_port()  # nothing listens there
    result = run(*SWEEP, "--out", tmp_path, *(a.format(port=port) for a in args))
    assert result.exit_code == 2
    assert result.stderr.startswith(message.format(port=port)) and len(result.stderr.strip().splitlines()) == 1


def test_auto_with_a_dead_ray_address_exits_2(monkeypatch):
    port = free_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    result = run(*PLAN, "--ray-address", "auto")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: --ray-address: no Ray cluster answers at ")
    assert result.stderr.strip().endswith(f":{port}, found by 'auto' (Connection refused)")


def test_without_the_flag_ray_is_never_imported(tmp_path):
    code = (
        "import sys; from typer.testing import CliRunner; from tokenrouter.cli import app; "
        f"args = {[*SWEEP, '--jobs', '1', '--out', str(tmp_path)]!r}, {[*PLAN, '--workers', '1']!r}; "
        "codes = [CliRunner().invoke(app, a).exit_code for a in args]; "
        "print(codes, 'ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[0, 0] False"


def test_jobs_go_round_the_nodes_in_proportion_to_their_cpus() -> None:
    assert node_slots({"b": 1, "a": 2}) == ["a", "b", "a"]
    assert node_slots({"a": 1, "b": 1}) == ["a", "b"]
    assert node_slots({"a": 0}) == []
