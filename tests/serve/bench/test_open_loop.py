"""Open-loop load (trserve/bench/arrivals.py, trserve/bench/open_loop.py): seeded Poisson times and trace files
against hand-worked values, the dispatcher on a scripted clock, the summary of a hand-made timeline, and one
run against a real server on emulated engines (counts only, no timing assertions)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from tests.serve.emulated_fixtures import emulated_config, emulated_url
from trcore import ConfigError
from trserve import eventloop
from trserve.bench.arrivals import Arrivals, poisson, read_trace
from trserve.bench.client import Workload, committed_tokens
from trserve.bench.open_loop import OpenRecord, check_window, dispatch, run_open_load, summarize


def test_poisson_times_are_the_seeded_exponential_gaps_summed():
    rng = random.Random(7)
    gaps = [rng.expovariate(4.0) for _ in range(200)]
    expected, t = [], 0.0
    for gap in gaps:
        t += gap
        if t >= 10.0:
            break
        expected.append(t)
    got = poisson(4.0, 10.0, seed=7)
    assert list(got.times_s) == expected and got.source == "poisson 4/s seed 7"
    assert poisson(4.0, 10.0, seed=7) == got and poisson(4.0, 10.0, seed=8) != got
    assert got.rate_rps(0.0, 10.0) == len(expected) / 10.0


def test_a_trace_reads_lines_json_and_json_lines(tmp_path):
    lines = tmp_path / "a.txt"
    lines.write_text("# arrivals\n0\n0.5\n\n0.5  # two at once\n2.25\n")
    assert read_trace(lines).times_s == (0.0, 0.5, 0.5, 2.25)
    listed = tmp_path / "b.json"
    listed.write_text("[0.1, 0.2, 3]")
    assert read_trace(listed).times_s == (0.1, 0.2, 3.0)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"arrival_s": 1.0}\n{"arrival_s": 1.5, "id": "x"}\n')
    assert read_trace(jsonl) == Arrivals((1.0, 1.5), "trace c.jsonl")
    assert Arrivals((0.0, 1.0, 2.0, 3.0), "t").within(2.0) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0\n1\n0.5\n", "a.txt:3: 0.5 s comes before"), ("0\nsoon\n", "a.txt:2: expected seconds"),
     ("-1\n", "a.txt:1: times must be >= 0"), ("# none\n", "holds no arrival times"),
     ('{"t": 1}\n', "a.txt:1: a JSON line needs an arrival_s field"),
     ('{"arrival_s": true}\n', "a.txt:1: expected seconds, got True"),
     ("0\n1_0\n", "a.txt:2: expected seconds, got '1_0'"), ('{"arrival_s": "2_5"}\n', "a.txt:1: expected seconds"),
     ("0\nnan\n", "a.txt:2: times must be finite, got 'nan'"), ("[0, NaN]", r"a.txt\[1\]: times must be finite")],
)  # fmt: skip
def test_a_bad_trace_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "a.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_trace(path)


def test_dispatch_sends_each_arrival_at_its_time_and_none_after_the_stop():
    now = [100.0]
    sent: list[tuple[int, float, float]] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    def send(i: int, at: float) -> Coroutine[Any, Any, None]:  # called when the task is made: record the clock then
        sent.append((i, at, now[0]))
        return asyncio.sleep(0)

    async def go() -> None:
        tasks = await dispatch((0.0, 0.5, 0.5, 2.0, 4.9, 5.0, 6.0), 100.0, 105.0, send, lambda: now[0], sleep)
        await asyncio.gather(*tasks)
        assert len(tasks) == 5

    asyncio.run(go())
    assert [(i, at) for i, at, _ in sent] == [(0, 100.0), (1, 100.5), (2, 100.5), (3, 102.0), (4, 104.9)]
    assert all(clock == at for _, at, clock in sent)  # each went out exactly when due on the scripted clock


def test_summary_of_a_hand_made_timeline():
    # Window [102, 106) of a run started at 100. Arrivals (offsets): 0.5, 1.5, 2.5, 3.0, 4.0, 5.5.
    recs = [
        OpenRecord(sent=100.5, first=101.0, done=102.5, num_tokens=4, dispatched=100.5),  # in: ttft .5, e2e 2
        OpenRecord(sent=101.5, first=102.5, done=104.5, num_tokens=5, dispatched=101.6),  # in: ttft 1, e2e 3
        OpenRecord(sent=102.5, first=103.0, done=107.0, num_tokens=3, dispatched=102.5),  # done after: backlog
        OpenRecord(sent=103.0, first=None, done=None, dispatched=103.2),  # cut at the end: backlog
        OpenRecord(sent=104.0, first=104.1, done=104.2, num_tokens=0, dispatched=104.0, error="503"),
        OpenRecord(sent=105.5, first=105.9, done=105.95, num_tokens=1, dispatched=105.5),  # in, one token
    ]
    arrivals = Arrivals((0.5, 1.5, 2.5, 3.0, 4.0, 5.5), "hand")
    result = summarize(recs, arrivals, start=100.0, win_start=102.0, win_end=106.0)
    assert (result.num_sent, result.num_finished, result.num_errors, result.num_in_flight_at_end) == (6, 3, 1, 2)
    assert result.ttft_s == pytest.approx([0.5, 1.0, 0.4]) and result.e2e_s == pytest.approx([2.0, 3.0, 0.45])
    assert result.tpot_s == pytest.approx([1.5 / 3, 2.0 / 4])  # the one-token request has no TPOT
    assert result.offered_rps == 4 / 4.0  # 2.5, 3.0, 4.0 and 5.5 fall in [2, 6)
    assert result.dispatch_lag_mean_s == pytest.approx(0.3 / 6) and result.dispatch_lag_max_s == pytest.approx(0.2)
    assert result.window_s == 4.0 and result.concurrency == 0
    # The window read until 106 but the sender stopped at 105.5: the arrival due at 5.5 was never offered.
    assert summarize(recs[:5], arrivals, 100.0, 102.0, 106.0, stop_at=105.5).offered_rps == 3 / 3.5


def test_a_window_read_after_the_sender_stopped_is_refused_not_reported():
    # Planned: warm-up from 100, window [102, 106), the sender stops at 106. Under a rate the client and server
    # cannot keep, /metrics was read at 106.3 and 106.34: the summary's offered rate was -0.0 (arrivals in
    # [2, 6) over 106 - 106.3) and the throughput the tokens of 40 ms, reported as the window's.
    poisson_load = Arrivals((0.5, 2.5, 5.5), "poisson 2000/s seed 0")
    assert summarize([], poisson_load, 100.0, 106.3, 106.34, stop_at=106.0).offered_rps <= 0
    with pytest.raises(
        ConfigError, match=r"--rate: the load fell behind .* read 4.30 s late, leaving 0.00 s of the 4 s"
    ):
        check_window(106.3, 106.34, 106.0, 4.0, poisson_load)
    with pytest.raises(ConfigError, match=r"--arrivals: .*leaving 1.50 s of the 4 s window"):
        check_window(104.5, 106.2, 106.0, 4.0, Arrivals((0.5,), "trace a.txt"))
    check_window(102.2, 106.1, 106.0, 4.0, poisson_load)  # 3.8 s of 4 under the load: kept


MAX_TOKENS = 8


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A routed server on emulated engines (1 / 2 ms steps)."""
    yield from emulated_url(tmp_path_factory.mktemp("open"), emulated_config())


@pytest.mark.serve
def test_open_loop_sends_every_arrival_of_the_run_and_counts_its_tokens(url: str) -> None:
    arrivals = poisson(20.0, 1.3, seed=3)
    load = eventloop.run(run_open_load(url, arrivals, Workload(MAX_TOKENS, warmup_s=0.3, window_s=1.0)))
    assert load.num_sent == len(arrivals.within(1.3)) == len(arrivals.times_s) and load.num_errors == 0
    assert load.num_finished > 0 and load.arrivals["source"] == "poisson 20/s seed 3"
    assert len(load.tpot_s) == load.num_finished and all(
        e >= t > 0 for e, t in zip(load.e2e_s, load.ttft_s, strict=True)
    )
    # The window's committed tokens cover at least the requests that ran wholly in it.
    finished_tokens = MAX_TOKENS * (load.num_finished - load.num_in_flight_at_end)
    assert committed_tokens(load.metrics_after, load.metrics_before) >= finished_tokens
