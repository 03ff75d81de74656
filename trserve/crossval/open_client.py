"""Cross-validation's open-loop client: request ``k`` is sent at its arrival time (Poisson arrivals at a rate, from
:func:`trserve.bench.arrivals.poisson`), whatever is still running, and its latency counts from that arrival.

An open-loop cell's arrivals are drawn over its whole run (warm-up and measured window) with seed
``arrival_seed + repeat``: every router and threshold vector sees the same arrival times in a repeat, and the
input repeat and the scored ones see different draws. Each request is the workload's ``k``-th at its full drawn
length (no session is shortened: requests start spread over time by the arrivals themselves). Its records are
the closed loop's (:class:`trserve.crossval.client.Client`), with ``submitted`` the arrival time on the monotonic
clock, so a request the client sends late (a busy event loop) has that lag in its latency.
"""

from __future__ import annotations

import asyncio
import time

from trserve.bench.arrivals import Arrivals, poisson
from trserve.crossval.client import Client, ClientWorkload
from trserve.frontend.book import FrontEnd


def draw_arrivals(rate_rps: float, warmup_s: float, measure_s: float, seed: int) -> Arrivals:
    """Poisson arrivals at ``rate_rps`` over a warm-up and measured window, from ``seed``: what a rate cell's
    repeat sends, and what the simulator replays for it (``trserve.crossval.sim_open``)."""
    return poisson(rate_rps, warmup_s + measure_s, seed)


def cell_arrivals(rate_rps: float, workload: ClientWorkload, seed: int) -> Arrivals:
    """Poisson arrivals at ``rate_rps`` over the cell's warm-up and measured window, from ``seed``."""
    return draw_arrivals(rate_rps, workload.warmup_s, workload.measure_s, seed)


class OpenClient(Client):
    """Sends request ``k`` at ``arrivals.times_s[k]`` seconds after the cell's start, each in its own task."""

    def __init__(self, frontend: FrontEnd, workload: ClientWorkload, tag: str, arrivals: Arrivals) -> None:
        super().__init__(frontend, workload, tag)
        self.times_s = arrivals.times_s
        self.num_sent = 0
        self._requests: set[asyncio.Task[bool]] = set()

    def start(self, start: float) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.run(start))]

    async def run(self, start: float) -> None:
        """Send every arrival at its time; when cancelled (the cell's end), cancel the requests still running."""
        try:
            for k, offset in enumerate(self.times_s):
                arrival = start + offset
                delay = arrival - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self.send(k, 1.0, arrival))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
                self.num_sent += 1
            await asyncio.Event().wait()  # the last arrival is sent: wait for the cell's end
        finally:
            pending = list(self._requests)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
