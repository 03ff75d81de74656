"""Open-loop load against one running server: each request is sent at its arrival time
(:mod:`trserve.bench.arrivals`) whatever the server's progress, on an idle keep-alive connection of a pool (a new
one when every connection is busy).

Latencies are measured from the arrival time, not from when the request went out, so a load generator that falls
behind shows as latency instead of hiding it (the dispatch lag is reported beside). Throughput is the server's
committed-token counter over the window, as in the closed loop (:mod:`trserve.bench.client`); requests still in
flight at the window's end are cancelled (the server aborts them). With ``Workload.lengths`` arrival ``i`` sends
the closed loop's request ``i`` of client 0 (:func:`trserve.bench.requests.request_body`: its drawn lengths and, with
``Workload.routing``, its own schedule); without, the fixed prompts with ``Workload.max_tokens``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from trcore import ConfigError
from trserve.bench.arrivals import Arrivals
from trserve.bench.client import PROMPTS, LoadResult, RequestRecord, Workload, _body, _metrics, committed_tokens
from trserve.bench.client import summarize as summarize_closed
from trserve.bench.requests import request_body
from trserve.bench.stream import Connection, StreamError

Send = Callable[[int, float], Coroutine[Any, Any, None]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


@dataclass
class OpenRecord(RequestRecord):
    """A request of an open-loop run: ``sent`` is its arrival time (absolute), ``dispatched`` when it went out."""

    index: int = 0
    dispatched: float | None = None
    error: str | None = None


@dataclass
class OpenLoadResult(LoadResult):
    """An open-loop run: the closed loop's figures (``concurrency`` 0) and what the arrivals offered and left."""

    arrivals: dict[str, Any] = field(default_factory=dict)
    #: Arrivals per second scheduled inside the window.
    offered_rps: float = 0.0
    num_sent: int = 0
    num_errors: int = 0
    #: Requests that had arrived by the window's end but not finished (the backlog).
    num_in_flight_at_end: int = 0
    #: Seconds each request went out after its arrival time: mean and max.
    dispatch_lag_mean_s: float = 0.0
    dispatch_lag_max_s: float = 0.0


async def dispatch(
    times_s: Sequence[float], start: float, stop_at: float, send: Send, clock: Clock, sleep: Sleep
) -> list[asyncio.Task[None]]:
    """Start ``send(index, arrival)`` as its own task at every arrival ``start + t`` before ``stop_at``; returns
    the tasks (the caller waits for or cancels them)."""
    tasks = []
    for i, t in enumerate(times_s):
        at = start + t
        if at >= stop_at:
            break
        delay = at - clock()
        if delay > 0:
            await sleep(delay)
        tasks.append(asyncio.create_task(send(i, at)))
    return tasks


def summarize(records: Sequence[OpenRecord], arrivals: Arrivals, start: float, win_start: float,
              win_end: float, stop_at: float | None = None) -> OpenLoadResult:  # fmt: skip
    """Latencies of the requests that finished inside the window (from their arrival), the offered rate, the
    backlog at the window's end and the dispatch lag (throughput is filled in by the caller). The offered rate
    counts the arrivals from the window's start to its end or to ``stop_at``, when the sender stopped, if that
    came first (the window is read a little after the planned end: arrivals due then were never sent)."""
    offered_end = win_end if stop_at is None else min(win_end, stop_at)
    closed = summarize_closed([r for r in records if r.error is None], 0, win_start, win_end)
    answered = [r for r in records if r.error is None and r.done is not None]
    lags = [r.dispatched - r.sent for r in records if r.dispatched is not None]
    backlog = [r for r in records if r.sent <= win_end and (r.done is None or r.done > win_end)]
    return OpenLoadResult(
        **{k: getattr(closed, k) for k in ("concurrency", "throughput_tok_s", "window_s", "num_finished")},
        ttft_s=closed.ttft_s, tpot_s=closed.tpot_s, e2e_s=closed.e2e_s, arrivals=arrivals.to_dict(),
        offered_rps=arrivals.rate_rps(win_start - start, offered_end - start), num_sent=len(records),
        num_errors=sum(r.error is not None for r in records), num_in_flight_at_end=len(backlog),
        dispatch_lag_mean_s=sum(lags) / len(lags) if lags else 0.0, dispatch_lag_max_s=max(lags, default=0.0),
        num_answered=len(answered), answered_tokens=sum(r.num_tokens for r in answered),
        asked_tokens=sum(r.asked_tokens for r in answered), num_failed=sum(r.error is not None for r in records),
        failures=[r.error for r in records if r.error is not None][:5],
    )  # fmt: skip


#: The least share of the asked window that must run under the load: a window read later (the client and the
#: server too busy to read ``/metrics`` on time) measured something else than the asked load.
MIN_WINDOW_SHARE = 0.5


def check_window(win_start: float, win_end: float, stop_at: float, window_s: float, arrivals: Arrivals) -> None:
    """Refuse a window of which less than :data:`MIN_WINDOW_SHARE` of the asked ``window_s`` ran while arrivals were
    sent (up to ``stop_at``): at a rate the client or server cannot keep, the window's start is read so late that
    the offered rate, throughput and latencies describe a sliver after the sender stopped."""
    held = min(win_end, stop_at) - win_start
    if held < MIN_WINDOW_SHARE * window_s:
        option = "--arrivals" if arrivals.source.startswith("trace") else "--rate"
        late = win_start - (stop_at - window_s)
        raise ConfigError(option, f"the load fell behind ({arrivals.source}): the window's start was read "
                          f"{late:.2f} s late, leaving {max(held, 0.0):.2f} s of the {window_s:g} s window under "
                          "the load; the client or server cannot keep this rate here, lower it")  # fmt: skip


#: A connection idle this long is closed rather than reused: the server (uvicorn's default keep-alive timeout,
#: 5 s) closes it first, and a request sent on it would fail. Low rates leave connections idle that long.
IDLE_LIMIT_S = 4.0


class _Pool:
    """Idle keep-alive connections, the most recently used first; a busy pool opens another, and a connection
    idle for :data:`IDLE_LIMIT_S` or more is closed instead of reused."""

    def __init__(self, url: str, clock: Clock = time.monotonic) -> None:
        self.url, self.opened, self.clock = url, 0, clock
        self.idle: list[tuple[Connection, float]] = []

    def acquire(self) -> Connection:
        now = self.clock()
        while self.idle:
            conn, since = self.idle.pop()
            if now - since < IDLE_LIMIT_S:
                return conn
            conn.close()
        self.opened += 1
        return Connection(self.url)

    def release(self, conn: Connection) -> None:
        self.idle.append((conn, self.clock()))

    def close(self) -> None:
        for conn, _ in self.idle:
            conn.close()


def request_for(work: Workload, i: int) -> dict[str, Any]:
    """Arrival ``i``'s request body: with ``work.lengths`` the closed loop's request ``i`` of client 0 (with
    ``work.routing`` its schedule too), else fixed prompt ``i`` (cycling) asking ``work.max_tokens``."""
    if work.lengths is not None:
        return request_body(work.lengths, 0, i, work.routing)
    return _body(PROMPTS[i % len(PROMPTS)], work)


async def _send(pool: _Pool, work: Workload, i: int, at: float, out: list[OpenRecord]) -> None:
    """One request, due at ``at``: recorded in ``out`` at once so a cut request counts in the backlog."""
    body = request_for(work, i)
    rec = OpenRecord(sent=at, index=i, dispatched=time.perf_counter(), key=f"0.{i}",
                     asked_tokens=int(body["max_tokens"]))  # fmt: skip
    out.append(rec)
    conn = pool.acquire()
    try:
        await conn.stream(conn.request("/v1/completions", body), rec)
    except StreamError as exc:
        rec.error = str(exc)
    except asyncio.CancelledError:
        conn.close()  # the server sees the disconnect and aborts the request
        raise
    rec.done = time.perf_counter()
    rec.first = rec.first or rec.done
    pool.release(conn)


async def run_open_load(url: str, arrivals: Arrivals, work: Workload,
                        probe: Callable[[], dict[str, Any]] | None = None) -> OpenLoadResult:  # fmt: skip
    """Send ``arrivals`` (times from now) until the window's end, ``work.warmup_s`` then ``work.window_s``;
    ``probe`` is read beside ``/metrics`` at both ends of the window."""
    read, pool = probe or dict, _Pool(url)
    records: list[OpenRecord] = []
    start = time.perf_counter()
    win_end = stop_at = start + work.warmup_s + work.window_s
    async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:  # /metrics only
        sender = asyncio.create_task(dispatch(arrivals.times_s, start, win_end,
                                              lambda i, at: _send(pool, work, i, at, records),
                                              time.perf_counter, asyncio.sleep))  # fmt: skip
        await asyncio.sleep(work.warmup_s)
        before, probe_before, win_start = await _metrics(client), read(), time.perf_counter()
        await asyncio.sleep(max(0.0, win_end - time.perf_counter()))
        after, probe_after, win_end = await _metrics(client), read(), time.perf_counter()
        tasks = await sender
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    pool.close()
    check_window(win_start, win_end, stop_at, work.window_s, arrivals)
    result = summarize(records, arrivals, start, win_start, win_end, stop_at)
    result.metrics_before, result.metrics_after = before, after
    result.probe_before, result.probe_after = probe_before, probe_after
    result.throughput_tok_s = committed_tokens(after, before) / result.window_s
    return result
