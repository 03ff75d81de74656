"""Launching: bad configs (and a port in use) are one clear line (exit 2); a model that cannot start stops the
launch with its log tail and leaves no process behind (exit 1), without waiting for the other models."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.serve.engine_support import model_dirs
from tests.serve.server_fixtures import server_config
from trcore.errors import ConfigError
from trserve.server.serve import check_listen

pytestmark = pytest.mark.serve


def serve(config_path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tokenrouter", "serve", "--config", str(config_path), "--port", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def _nowhere(config):
    config["models"][0]["path"] = "/nowhere"
    return config


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda c: {**c, "mode": "sideways"}, "mode"),
        (lambda c: {**c, "router": {"program": "nope"}}, "unknown routing program 'nope'"),
        (lambda c: {**c, "router": {"program": "no_such_module:P"}}, "router.program: cannot import 'no_such_module'"),
        (lambda c: {**c, "batching": {"thresholds": [1]}}, "one entry per model"),
        (_nowhere, "models.0.path"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path, change, words):
    config = change(server_config(model_dirs(), backend="hash"))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = serve(path, timeout_s=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


def test_a_port_in_use_is_one_line_and_exit_2_before_any_worker_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "tokenrouter", "serve", "--config", "configs/emulated-r2r-a100.yaml",
               "--port", str(port)]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr  # was uvicorn's error, exit 3, once the workers had started
    assert result.stderr.splitlines() == [
        f"error: server.port: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def test_the_listen_check_reads_hosts_as_the_server_does():
    check_listen("", 0)  # "": every interface to asyncio's server (uvicorn), not an unknown host
    check_listen("localhost", 0)
    with pytest.raises(ConfigError, match=r"server\.host"):
        check_listen("no-such-host.invalid", 0)


def test_model_that_cannot_start_stops_the_launch_with_its_log_tail(tmp_path):
    large, small = model_dirs()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):  # a checkpoint without weights
        shutil.copy(Path(small) / name, broken / name)
    config = server_config((large, str(broken)))
    config["models"][1]["name"] = "broken"
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    result = serve(path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error: worker 'broken' exited with status" in result.stderr and "last lines of" in result.stderr
    run_dir = re.search(r"logs in (\S+)", result.stderr).group(1)  # type: ignore[union-attr]
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if run_dir in " ".join(p.info["cmdline"] or ())]
    assert leftovers == []  # the healthy model's worker was stopped too
    print(f"launch failure reported after {time.monotonic() - started:.1f} s")


def test_demo_serves_a_routed_workload_and_stops(tmp_path):
    config = server_config(model_dirs(), backend="hash")  # with an API key, which the demo must send
    config["router"]["params"]["handoff_prob"] = 0.3
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "tokenrouter", "demo", "--config", str(path), "--num-requests", "6"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"demo: 6 requests, \d+ output tokens in [0-9.]+ s = [0-9.]+ tok/s", result.stdout)
    assert re.search(r"demo:   large: \d+ tokens committed, [1-9]\d* hand-offs", result.stdout)
    assert re.search(r"demo: the large model \(small\) wrote [0-9.]+% of the output tokens", result.stdout)
    sample = re.search(
        r"sample answer to 'What is the capital of France\?': .* \((\d+) of its (\d+) tokens by", result.stdout
    )
    assert sample and int(sample[1]) <= int(sample[2]) > 0, result.stdout


def test_demo_refuses_max_tokens_beyond_the_context_before_starting_anything():
    cmd = [sys.executable, "-m", "tokenrouter", "demo", "--config", "configs/emulated-r2r-a100.yaml",
           "--max-tokens", "100000"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: --max-tokens: 100000 leaves no room for a prompt")
