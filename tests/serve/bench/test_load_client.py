"""The load generator's lean client (trserve/bench/stream.py, driven by trserve/bench/client.run_load) against
a real server on emulated engines, and the event loop both run on (trserve/eventloop.py).

Token counts are checked against what was asked (every request wants exactly ``max_tokens``, ``ignore_eos``)
and against the server's own committed-token counter; a refused request and an error event are errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.serve.emulated_fixtures import emulated_config, emulated_url
from trserve import eventloop
from trserve.bench.client import Workload, committed_tokens, run_load
from trserve.bench.requests import Lengths
from trserve.bench.stream import Connection, StreamError

pytestmark = pytest.mark.serve

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A routed server on emulated engines (1 / 2 ms steps) that hands off about every third token."""
    yield from emulated_url(tmp_path_factory.mktemp("load"), emulated_config())


def test_closed_loop_load_counts_every_token_of_every_request(url: str) -> None:
    probes = iter(range(100))
    load = eventloop.run(
        run_load(url, 4, Workload(MAX_TOKENS, warmup_s=0.3, window_s=1.0), lambda: {"k": next(probes)})
    )
    assert load.num_finished > 0
    assert all(t > 0 for t in load.ttft_s) and all(e >= t for e, t in zip(load.e2e_s, load.ttft_s, strict=True))
    assert len(load.tpot_s) == load.num_finished  # every finished request reported MAX_TOKENS > 1 tokens
    # The window's committed tokens (the server's counter) cover at least the requests that ran wholly in it.
    assert committed_tokens(load.metrics_after, load.metrics_before) >= MAX_TOKENS * (load.num_finished - 4)
    assert (load.probe_before, load.probe_after) == ({"k": 0}, {"k": 1})
    # Over the whole run every answered request got exactly what it asked for (the server's usage per answer).
    assert load.num_answered >= load.num_finished > 0 and load.num_failed == 0
    assert load.answered_tokens == load.asked_tokens == MAX_TOKENS * load.num_answered


def test_with_lengths_each_answer_counts_the_length_it_asked_for(url: str) -> None:
    lengths = Lengths("short-reasoning", 0.02)
    work = Workload(warmup_s=0.2, window_s=0.8, lengths=lengths, record_text=True)
    load = eventloop.run(run_load(url, 3, work))
    drawn = [lengths.draw(*map(int, key.split(".")))[1] for key in load.answers]  # each answered request's length
    assert load.num_answered == len(drawn) > 3 and len(set(drawn)) > 1
    assert load.answered_tokens == load.asked_tokens == sum(drawn)


class Rec:
    first: float | None = None
    num_tokens = 0


def test_the_usage_chunk_gives_the_token_count_and_the_first_text_chunk_the_first_token_time(url: str) -> None:
    async def one() -> Rec:
        conn, rec = Connection(url), Rec()
        body = {"model": "tokenrouter", "prompt": "hello", "max_tokens": MAX_TOKENS, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        try:
            await conn.stream(conn.request("/v1/completions", body), rec)
            await conn.stream(conn.request("/v1/completions", {**body, "max_tokens": 3}), second := Rec())
        finally:
            conn.close()
        assert second.num_tokens == 3  # the same keep-alive connection serves the next request
        return rec

    rec = asyncio.run(one())
    assert rec.num_tokens == MAX_TOKENS and rec.first is not None


def test_a_refused_request_raises_with_the_status(url: str) -> None:
    async def refused() -> None:
        conn = Connection(url)
        try:
            await conn.stream(conn.request("/v1/completions", {"prompt": "x", "max_tokens": 0, "stream": True}), Rec())
        finally:
            conn.close()

    with pytest.raises(StreamError, match="server answered 400"):
        asyncio.run(refused())


def test_only_plain_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="plain http"):
        Connection("https://example.com")


def test_the_event_loop_is_uvloop_when_installed_and_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    pytest.importorskip("uvloop", reason="uvloop is in the cpu extra")
    assert eventloop.loop_name() == "uvloop" and eventloop.run(loop_module()).startswith("uvloop")
    monkeypatch.setenv("TOKENROUTER_ASYNCIO_LOOP", "asyncio")
    assert eventloop.loop_name() == "asyncio" and eventloop.run(loop_module()).startswith("asyncio")


def test_an_error_event_inside_the_stream_raises() -> None:
    with pytest.raises(StreamError, match="model process died"):
        Connection._parse_events(b'data: {"text":"a"}\n\ndata: {"error":{"message":"model process died"}}\n\n', Rec())
