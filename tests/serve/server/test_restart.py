"""Killing a subserver costs latency, not requests: under 32 in-flight streams, each model's process is killed in
turn; every stream pauses while it restarts, resumes where it was (re-prefilled from the front end's record) and
ends with exactly the text of an uninterrupted run (greedy, float32 on vLLM). Requests that arrive meanwhile wait
and are served. Only without a restart (budget used up or disabled) do requests fail with 503.

Marked ``disruptive``: it kills processes of the shared servers (one restart per model of each; the fixtures
allow two), so ``tests/serve/conftest.py`` runs it after every other test; the servers are healthy afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.serve.server_fixtures import MODEL, Served, server_config, start_served, wait_idle

pytestmark = [pytest.mark.serve, pytest.mark.disruptive]

NUM_STREAMS = 32
#: Non-streaming requests in flight beside the streams: their answers carry token ids, compared exactly.
NUM_PLAIN = 8
#: Long enough that every stream is mid-way when the kill lands (the hash engine steps in milliseconds).
MAX_TOKENS = {"hash": 200, "vllm": 24}


@dataclass
class Streamed:
    status: int = 0
    lines: list[str] = field(default_factory=list)

    @property
    def chunks(self) -> list[dict]:
        return [json.loads(line[6:]) for line in self.lines if line.startswith("data: {")]

    @property
    def text(self) -> str:
        return "".join(c["choices"][0]["text"] for c in self.chunks if c.get("choices"))

    @property
    def completion_tokens(self) -> int:
        return next(c["usage"]["completion_tokens"] for c in self.chunks if c.get("usage"))

    @property
    def errors(self) -> list[dict]:
        return [c for c in self.chunks if "error" in c]


def body(server: Served, i: int, **extra: object) -> dict:
    """Request ``i``; its hand-off decisions are keyed by ``i``, not its random id, so every run routes it alike."""
    request = {"model": MODEL, "prompt": f"Story {i}: once upon a time", "max_tokens": MAX_TOKENS[server.backend],
               "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
               "routing_extra": {"handoff_prob": 0.3, "decision_key": f"request-{i}"}, **extra}  # fmt: skip
    if not request["stream"]:  # stream_options goes with a stream only (400 otherwise, as vLLM answers)
        del request["stream_options"]
    return request


@dataclass
class Run:
    streams: list[Streamed]
    plain: list[tuple[int, list[int] | None]]  # status, output token ids
    late_status: int | None = None
    #: Per stream: whether it had ended ("[DONE]") before the kill.
    done_at_kill: list[bool] = field(default_factory=list)


async def marked_down(client: httpx.AsyncClient, model: int, timeout_s: float = 60.0) -> None:
    """Wait for the launcher's own signal: ``/health`` lists ``model`` as down (set when it saw the process die,
    before any restart)."""
    deadline = time.monotonic() + timeout_s
    while str(model) not in (await client.get("/health")).json()["down"]:
        assert time.monotonic() < deadline, f"model {model} was never marked down"
        await asyncio.sleep(0.005)


async def streams(server: Served, kill: tuple[int, int] | None = None) -> Run:
    """Run the streams and the plain requests; with ``kill`` (pid, model), SIGKILL the pid once every stream has a
    few chunks, wait until the server marks the model down, then send one more request."""
    results = [Streamed() for _ in range(NUM_STREAMS)]
    async with server.async_client(timeout=900.0) as client:

        async def one(i: int) -> None:
            async with client.stream("POST", "/v1/completions", json=body(server, i)) as response:
                results[i].status = response.status_code
                async for line in response.aiter_lines():
                    if line:
                        results[i].lines.append(line)

        async def plain(i: int) -> tuple[int, list[int] | None]:
            response = await client.post("/v1/completions", json=body(server, i, stream=False, return_token_ids=True))
            ok = response.status_code == 200
            return response.status_code, response.json()["choices"][0]["token_ids"] if ok else None

        tasks = [asyncio.ensure_future(one(i)) for i in range(NUM_STREAMS)]
        plains = [asyncio.ensure_future(plain(NUM_STREAMS + i)) for i in range(NUM_PLAIN)]
        late_status, done_at_kill = None, []
        if kill is not None:
            deadline = time.monotonic() + 300
            while min(len(r.lines) for r in results) < 4:
                assert time.monotonic() < deadline, "the streams did not start"
                await asyncio.sleep(0.01)
            done_at_kill = [r.lines[-1] == "data: [DONE]" for r in results]
            os.kill(kill[0], signal.SIGKILL)
            await marked_down(client, kill[1])
            late = await client.post("/v1/completions", json=body(server, 99, stream=False, max_tokens=4))
            late_status = late.status_code
        await asyncio.gather(*tasks)
        return Run(results, list(await asyncio.gather(*plains)), late_status, done_at_kill)


#: ``vllm_small_kv``: the kill lands while sessions are spilled and requests preempted (17- and 18-block caches).
@pytest.fixture(params=["hash", "tcp_hash", "unix_hash", "vllm", "vllm_small_kv"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


@pytest.fixture(scope="module")
def uninterrupted(server: Served) -> Run:
    run = asyncio.run(streams(server))
    assert all(r.status == 200 and not r.errors for r in run.streams)
    assert all(status == 200 for status, _ in run.plain)
    return run


def wait_healthy(server: Served, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    with server.client() as client:
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the subserver did not come back"
            time.sleep(0.5)


@pytest.mark.parametrize("victim", [0, 1])
def test_killed_model_costs_latency_not_requests(
    server: Served, uninterrupted: Run, victim: int, request: pytest.FixtureRequest
):
    wait_healthy(server)
    before = server.state()
    pid = next(w["pid"] for w in before["workers"] if w["model"] == victim)
    run = asyncio.run(streams(server, kill=(pid, victim)))
    for got, want in zip(run.streams, uninterrupted.streams, strict=True):
        assert got.status == 200 and not got.errors, got.lines[-3:]
        assert got.lines[-1] == "data: [DONE]"
        assert got.text == want.text  # resumed where it was: no token twice, none missing, none different
        assert got.completion_tokens == want.completion_tokens == MAX_TOKENS[server.backend]
    assert run.plain == uninterrupted.plain  # the same token ids, all 200
    assert run.late_status == 200  # admitted while the model restarted: it waited
    wait_healthy(server)
    with server.client() as client:
        metrics = client.get("/metrics").text
    name = ("large", "small")[victim]
    assert f'tokenrouter_model_restarts_total{{model="{name}"}} 1.0' in metrics
    resumed = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("tokenrouter_requests_resumed_total")
    )
    # Every stream was in flight at each kill; with the small caches some wait for memory on the other model,
    # so only some are resumed (the answers above are checked whole either way).
    in_flight = 1 if request.node.callspec.params["server"] == "vllm_small_kv" else NUM_STREAMS
    assert resumed >= in_flight * (victim + 1)
    after = wait_idle(server)
    workers = {w["model"]: w for w in after["workers"]}
    assert workers[victim]["pid"] != pid
    assert [(w["num_resident"], w["kv_usage"]) for w in workers.values()] == [(0, 0.0)] * len(workers)
    # A new inbox (tcp: a new port; ipc, unix: a new socket file), and the peer was told by one Rewire.
    assert after["inboxes"][str(victim)] != before["inboxes"][str(victim)]
    peer = 1 - victim
    told = [next(w for w in s["workers"] if w["model"] == peer)["received"].get("Rewire", 0) for s in (before, after)]
    assert told[1] == told[0] + 1


@pytest.fixture(scope="module")
def no_restart_server(tmp_path_factory: pytest.TempPathFactory, hash_server: Served) -> Iterator[Served]:
    dirs = hash_server.model_dirs
    config = server_config(dirs, backend="hash", restart={"enabled": False, "max_restarts": 0})
    yield from start_served(tmp_path_factory.mktemp("no-restart"), config, dirs)


def test_without_a_restart_in_flight_requests_fail_with_503(no_restart_server: Served):
    server = no_restart_server
    pid = next(w["pid"] for w in server.state()["workers"] if w["model"] == 1)
    run = asyncio.run(streams(server, kill=(pid, 1)))
    assert run.late_status == 503  # sent after the server marked the model down, with no restart to wait for
    full = MAX_TOKENS[server.backend]
    # Each request ended one of two ways: whole (every token, no error), or failed once with the 503 of a model
    # that will not restart and short of its length. One that had ended before the kill is whole.
    for got, done in zip(run.streams, run.done_at_kill, strict=True):
        assert got.status == 200 and got.lines[-1] == "data: [DONE]"
        usage = [c["usage"]["completion_tokens"] for c in got.chunks if c.get("usage")]
        if got.errors:
            assert not done and len(got.errors) == 1 and usage != [full], got.lines[-3:]
            assert got.errors[0]["error"]["code"] == 503 and "restarts disabled" in got.errors[0]["error"]["message"]
        else:
            assert usage == [full], got.lines[-3:]
    assert any(r.errors for r in run.streams)  # the kill came while streams were running (4+ chunks of 200)
    for status, token_ids in run.plain:
        assert status == 503 or (status == 200 and token_ids is not None and len(token_ids) == full)
    with server.client() as client:
        assert client.get("/health").status_code == 503
