"""Open-loop load with length presets (trserve/bench/open_loop.py): arrival ``i`` sends exactly the closed loop's
request ``i`` of client 0 (lengths, and with a routing its schedule), the fixed prompts without a preset, the pool
drops connections the server would have closed (a scripted clock), and one run against a server on emulated
engines routed by each request's schedule (counts only, no timing assertions)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.serve.emulated_fixtures import emulated_config, emulated_url
from trserve import eventloop
from trserve.bench.arrivals import poisson
from trserve.bench.client import PROMPTS, Workload
from trserve.bench.open_loop import IDLE_LIMIT_S, OpenRecord, _Pool, _send, request_for, run_open_load
from trserve.bench.requests import Lengths, request_body

LENGTHS = Lengths("short-reasoning", 0.0625, seed=5)
ROUTING = ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])


class FakeConnection:
    """Records what would be sent and answers with exactly the tokens asked."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def request(self, path: str, body: dict[str, Any]) -> bytes:
        self.bodies.append(body)
        return json.dumps(body).encode()

    async def stream(self, request: bytes, rec: OpenRecord) -> None:
        rec.num_tokens = json.loads(request)["max_tokens"]


class FakePool(_Pool):
    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1")
        self.conn = FakeConnection()

    def acquire(self) -> Any:
        return self.conn


def sent_bodies(work: Workload, count: int) -> tuple[list[dict[str, Any]], list[OpenRecord]]:
    pool, records = FakePool(), []

    async def go() -> None:
        for i in range(count):
            await _send(pool, work, i, 0.0, records)

    asyncio.run(go())
    return pool.conn.bodies, records


def test_with_lengths_arrival_i_sends_the_closed_loops_request_i_of_client_0():
    bodies, records = sent_bodies(Workload(max_tokens=7, lengths=LENGTHS, routing=ROUTING), 5)
    assert bodies == [request_body(LENGTHS, 0, i, ROUTING) for i in range(5)]
    assert all("schedule" in b["routing_extra"] for b in bodies)
    assert [r.asked_tokens for r in records] == [LENGTHS.draw(0, i)[1] for i in range(5)]
    assert [r.num_tokens for r in records] == [r.asked_tokens for r in records] and records[3].key == "0.3"
    plain, _ = sent_bodies(Workload(max_tokens=7, lengths=LENGTHS), 2)
    assert plain == [request_body(LENGTHS, 0, i, None) for i in range(2)] and "routing_extra" not in plain[0]


def test_without_lengths_the_fixed_prompts_cycle_with_max_tokens():
    bodies, records = sent_bodies(Workload(max_tokens=7), len(PROMPTS) + 1)
    assert [b["prompt"] for b in bodies] == [*PROMPTS, PROMPTS[0]]
    assert {b["max_tokens"] for b in bodies} == {7} and {r.asked_tokens for r in records} == {7}
    assert request_for(Workload(max_tokens=7), 2) == bodies[2]


class Closable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_pool_reuses_a_fresh_connection_and_closes_a_stale_one():
    now = [0.0]
    pool = _Pool("http://127.0.0.1:1", clock=lambda: now[0])
    first = pool.acquire()
    pool.release(first)
    now[0] = IDLE_LIMIT_S - 0.1
    assert pool.acquire() is first and pool.opened == 1
    stale, fresh = Closable(), Closable()
    pool.idle = [(stale, 0.0), (fresh, now[0])]  # type: ignore[list-item]
    assert pool.acquire() is fresh and not fresh.closed  # the most recently released first
    now[0] += IDLE_LIMIT_S
    newer = pool.acquire()
    assert stale.closed and newer is not stale and pool.opened == 2 and pool.idle == []


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A routed server on emulated engines (1 / 2 ms steps) taking each request's own schedule."""
    yield from emulated_url(
        tmp_path_factory.mktemp("open-lengths"), emulated_config({"program": "schedule", "params": {}})
    )


@pytest.mark.serve
def test_open_loop_with_lengths_and_schedules_answers_every_request_in_full(url: str) -> None:
    arrivals = poisson(20.0, 1.3, seed=3)
    work = Workload(max_tokens=1, warmup_s=0.3, window_s=1.0, lengths=LENGTHS, routing=ROUTING)
    load = eventloop.run(run_open_load(url, arrivals, work))
    assert load.num_sent == len(arrivals.times_s) and load.num_errors == 0  # every schedule accepted
    assert load.num_answered > 0 and load.answered_tokens == load.asked_tokens
    # The preset's outputs are at least 1 token (2048 x 0.0625 at most): more than max_tokens=1 on average.
    assert load.asked_tokens > load.num_answered
