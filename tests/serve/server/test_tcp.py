"""The server over ``server.transport: tcp`` (hash engines): the same answers as over ``ipc``; strangers who
connect to its ports (no CURVE, or CURVE with a made-up key) reach nothing while real requests run, not even
with well-formed messages that would end those requests; and bad bytes on an ``ipc`` inbox are dropped without
stopping the worker or the front end. The restart over tcp is in ``test_restart.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import zmq

from tests.serve.runtime.test_transport import stranger
from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import MODEL, Served
from trserve.engine.hash import hash_next
from trserve.runtime.messages import Abort, Failed, Finished, Shutdown, StepReport
from trserve.runtime.wire import encode

NUM_STREAMS = 12
#: Long enough that every stream is still running when the strangers send (the hash engine steps in ms).
MAX_TOKENS = 300


def body(i: int, **extra: object) -> dict:
    return {"model": MODEL, "prompt": [300 + 11 * i + k for k in range(4 + i % 5)], "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "routing_extra": {"handoff_prob": 0.3, "decision_key": f"s{i}"},
            **extra}  # fmt: skip


def expected_tokens(i: int) -> list[int]:
    """Request ``i``'s tokens, recomputed from the hash engine and the schedule program's keyed decisions."""
    prompt = body(i)["prompt"]
    return reference(lambda m, seq: hash_next(m, seq).token_id, prompt, f"s{i}", MAX_TOKENS, prob=0.3)


async def answers(server: Served) -> list[list[int]]:
    async with server.async_client() as client:

        async def one(i: int) -> list[int]:
            response = await client.post("/v1/completions", json=body(i, return_token_ids=True))
            assert response.status_code == 200, response.text
            return list(response.json()["choices"][0]["token_ids"])

        return list(await asyncio.gather(*(one(i) for i in range(NUM_STREAMS))))


def test_tcp_answers_equal_those_over_ipc(hash_server: Served, tcp_hash_server: Served):
    over_tcp = asyncio.run(answers(tcp_hash_server))
    assert over_tcp == asyncio.run(answers(hash_server))
    assert over_tcp == [expected_tokens(i) for i in range(NUM_STREAMS)]
    assert tcp_hash_server.state()["inboxes"]["frontend"].startswith("tcp://127.0.0.1:")


#: Chunks every stream must receive after the attack (each from a later engine step than the attack's messages)
#: before the attack counts as having met running requests.
AFTER_ATTACK = 5


async def streams(server: Served, attack: Callable[[list[str]], None]) -> tuple[list[str], bool]:
    """Stream every request; once each has its id (first chunk), call ``attack(ids)``. Returns the texts and
    whether every stream went on for :data:`AFTER_ATTACK` more chunks after the attack (so a delivered message
    had those steps of the server to act while the request ran; at 300 tokens a stream has them unless a
    message ended it)."""
    texts, ids = [""] * NUM_STREAMS, [""] * NUM_STREAMS
    chunks = [0] * NUM_STREAMS
    async with server.async_client() as client:

        async def one(i: int) -> None:
            async with client.stream("POST", "/v1/completions", json=body(i, stream=True)) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        ids[i] = chunk["id"]
                        chunks[i] += 1
                        texts[i] += "".join(c["text"] for c in chunk.get("choices", ()))
                        texts[i] += json.dumps(chunk["error"]) if "error" in chunk else ""

        tasks = [asyncio.create_task(one(i)) for i in range(NUM_STREAMS)]
        while not all(ids):
            await asyncio.sleep(0.005)
        attack(ids)
        goal = [n + AFTER_ATTACK for n in chunks]
        while not all(t.done() or n >= g for t, n, g in zip(tasks, chunks, goal, strict=True)):
            await asyncio.sleep(0.005)
        running = all(n >= g for n, g in zip(chunks, goal, strict=True))
        await asyncio.gather(*tasks)
    return texts, running


def forgeries(ids: list[str]) -> tuple[list[bytes], list[bytes]]:
    """Well-formed messages that would end every request early (to the front end) or stop a worker."""
    lies = [Finished(rid, (7, 7, 7), "stop") for rid in ids]
    report = StepReport(0, 1, 1, 0.0, 0, 0, 0, 0.0, [(rid, 0, (7,)) for rid in ids], lies, [Failed(ids[0], "x")])
    to_frontend = [encode(report), b"garbage"]
    to_worker = [*(encode(Abort(rid, 9)) for rid in ids), encode(Shutdown()), b"garbage"]
    return to_frontend, to_worker


def test_strangers_reach_nothing_on_a_tcp_server(tcp_hash_server: Served):
    server = tcp_hash_server
    assert server.log_dir is not None
    spec = json.loads((server.log_dir / "run-0-g0.json").read_text())
    server_key = spec["endpoints"]["keys"]["server_public"].encode()  # even knowing the run's server key
    before = server.state()
    inboxes = before["inboxes"]
    made_up = zmq.curve_keypair()
    sockets: list[zmq.Socket] = []

    def attack(ids: list[str]) -> None:
        to_frontend, to_worker = forgeries(ids)
        for name, messages in [("frontend", to_frontend), ("0", to_worker), ("1", to_worker)]:
            for curve in (None, (server_key, *made_up)):
                sock = stranger(inboxes[name], curve)
                sockets.append(sock)
                for data in messages:
                    sock.send(data, zmq.NOBLOCK)

    try:
        texts, running = asyncio.run(streams(server, attack))
    finally:
        for sock in sockets:
            sock.close(linger=0)
    undisturbed, _ = asyncio.run(streams(server, lambda ids: None))
    assert texts == undisturbed  # (without CURVE the forged Finished messages end every stream with 7s)
    assert running, "a stream ended right after the strangers' messages: the test proves nothing"
    after = server.state()
    assert [w["pid"] for w in after["workers"]] == [w["pid"] for w in before["workers"]]
    for was, now in zip(before["workers"], after["workers"], strict=True):
        for name in ("Shutdown", "Abort", "bad"):
            assert now["received"].get(name, 0) == was["received"].get(name, 0), name
    assert after["received"].get("bad", 0) == before["received"].get("bad", 0)


def test_bad_bytes_on_ipc_are_dropped_and_the_server_goes_on(hash_server: Served):
    """Only this user's processes reach the ``ipc`` sockets; whatever they send that is not a message is logged
    and dropped by the worker and the front end, which keep serving."""
    before = hash_server.state()
    sockets = [stranger(before["inboxes"][name]) for name in ("frontend", "1")]
    try:
        for sock in sockets:
            sock.send(b"\x93not a message")
            sock.send(b"builtins:dict\n\x80")
        first = asyncio.run(answers(hash_server))
    finally:
        for sock in sockets:
            sock.close(linger=0)
    after = hash_server.state()
    assert first == [expected_tokens(i) for i in range(NUM_STREAMS)]
    assert after["received"].get("bad", 0) == before["received"].get("bad", 0) + 2
    worker = [next(w for w in s["workers"] if w["model"] == 1) for s in (before, after)]
    assert worker[1]["received"].get("bad", 0) == worker[0]["received"].get("bad", 0) + 2
    assert worker[1]["pid"] == worker[0]["pid"]
