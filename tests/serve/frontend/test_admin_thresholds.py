"""``/admin/thresholds`` on the shared real-vLLM server: a vector set by hand reaches both subservers (their
probes report it), requests still answer in full across the switch, bad vectors get a 4xx naming the field and
change nothing; the run's own vector is put back at the end, as other tests share the server."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.serve.server_fixtures import MODEL, Served

pytestmark = pytest.mark.serve

ROUTED = {"handoff_prob": 0.5, "decision_key": "admin-thresholds"}
BODY = {"model": MODEL, "prompt": "Name three rivers of Africa:", "max_tokens": 12, "temperature": 0,
        "ignore_eos": True, "routing_extra": ROUTED}  # fmt: skip


def worker_thresholds(server: Served, expected: list[int]) -> list[int]:
    """Each model's threshold as its subserver reports it, polled until it is ``expected`` (or 10 s pass)."""
    deadline = time.monotonic() + 10.0
    while True:
        workers = sorted(server.state()["workers"], key=lambda w: w["model"])
        seen = [w["threshold"] for w in workers]
        if seen == expected or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


def put(server: Served, body: dict[str, Any]) -> Any:
    with server.client() as c:
        return c.put("/admin/thresholds", json=body)


def test_a_vector_set_by_hand_reaches_every_subserver_and_requests_answer(vllm_server: Served) -> None:
    with vllm_server.client() as c:
        before = c.get("/admin/thresholds").json()
    assert before == {"thresholds": [3, 2], "source": "config"}  # the fixture's config
    assert worker_thresholds(vllm_server, [3, 2]) == [3, 2]
    try:
        answer = put(vllm_server, {"thresholds": [1, 4]})
        assert answer.status_code == 200 and answer.json() == {"thresholds": [1, 4], "source": "admin"}
        assert worker_thresholds(vllm_server, [1, 4]) == [1, 4]
        with vllm_server.client() as c:
            done = [c.post("/v1/completions", json=BODY) for _ in range(2)]
        assert [r.status_code for r in done] == [200, 200]
        assert all(r.json()["usage"]["completion_tokens"] == 12 for r in done)
    finally:
        assert put(vllm_server, {"thresholds": [3, 2]}).status_code == 200
    assert worker_thresholds(vllm_server, [3, 2]) == [3, 2]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"thresholds": [2]}, "thresholds"),  # one value for two models
        ({"thresholds": [0, 1]}, "thresholds.0"),
        ({"thresholds": [1, 65]}, "thresholds.1"),  # above max_num_seqs (64)
        ({"thresholds": ["x", 1]}, "thresholds"),
        ({"thresholds": [True, 2]}, "thresholds.0"),  # strict: not coerced to 1
        ({"thresholds": [1, 1], "table": {}}, "table"),  # unknown fields are refused, not ignored
        ({}, "thresholds"),
    ],
)
def test_a_bad_vector_is_refused_naming_the_field_and_changes_nothing(
    vllm_server: Served, body: dict[str, Any], param: str
) -> None:
    answer = put(vllm_server, body)
    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()["error"]
    assert param in (error["param"] or "") or param in error["message"], error
    with vllm_server.client() as c:
        assert c.get("/admin/thresholds").json()["thresholds"] == [3, 2]


def test_admin_routes_need_the_api_key(vllm_server: Served) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=30.0) as c:
        assert c.get("/admin/thresholds").status_code == 401
        assert c.put("/admin/thresholds", json={"thresholds": [1, 1]}).status_code == 401
