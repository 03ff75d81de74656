"""Cross-validation's in-process clients: the workload they send (:class:`ClientWorkload`), the records every client
keeps (:class:`Client`: token arrivals, finished and full-length requests, per request (submitted, first token,
done, tokens)) and the closed loop (:class:`ClosedClient`: N sessions, a finished request replaced at once).
The open loop is :class:`trserve.crossval.open_client.OpenClient`.

Requests go straight to the front end (``frontend.submit``), without HTTP; times are on ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from trcore import RequestSpec
from trserve.frontend.book import FrontEnd
from trserve.frontend.generation import Overloaded, Unavailable


@dataclass(frozen=True)
class ClientWorkload:
    """The workload: prompts (token ids, cycled), output length, sampling, window lengths.
    ``output_lengths`` (cycled with the prompts' counter) replaces the fixed ``max_tokens`` when given."""

    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    warmup_s: float
    measure_s: float
    sampling: dict[str, Any] = field(default_factory=dict)
    output_lengths: tuple[int, ...] = ()
    name: str = "fixed"

    def output_length(self, k: int) -> int:
        """Output tokens of the workload's ``k``-th request."""
        return self.output_lengths[k % len(self.output_lengths)] if self.output_lengths else self.max_tokens

    @property
    def mean_output(self) -> float:
        """Mean output tokens per request."""
        lengths = self.output_lengths or (self.max_tokens,)
        return sum(lengths) / len(lengths)


class Client:
    """Sends the workload's requests and records token arrival times, finished requests and their (submitted,
    first token, done, tokens) times; subclasses decide when requests are sent (:meth:`start`)."""

    def __init__(self, frontend: FrontEnd, workload: ClientWorkload, tag: str) -> None:
        self.frontend = frontend
        self.workload = workload
        self.tag = tag
        self.arrivals: list[tuple[float, int]] = []
        self.finished: set[str] = set()
        self.full_length: set[str] = set()
        self.specs: dict[str, RequestSpec] = {}
        self.timings: dict[str, tuple[float, float, float, int]] = {}
        self.intended: dict[str, int] = {}
        self.successor: dict[str, str] = {}  # a finished request -> its session's next (closed loop)
        self.send_lags: list[float] = []  # per request sent: from its arrival time to the submit call
        self.error: str | None = None
        self.num_refused = 0  #: requests the front end refused (its queue full, or a model down)

    def start(self, start: float) -> list[asyncio.Task[None]]:
        """Start sending (``start``: the cell's start on the monotonic clock); cancelling the tasks stops it."""
        raise NotImplementedError

    def request_id(self, k: int) -> str:
        return f"{self.tag}-{k}"

    async def send(self, k: int, fraction: float, submitted: float) -> bool:
        """Submit the workload's ``k``-th request, ``fraction`` of its drawn length, as submitted at ``submitted``,
        and record its tokens until it is done; False when it failed or was refused (``error`` says why)."""
        wl = self.workload
        prompt = wl.prompts[k % len(wl.prompts)]
        rid = self.request_id(k)
        full = wl.output_length(k)
        max_tokens = max(1, round(full * fraction)) if fraction < 1 else full
        spec = RequestSpec(rid, len(prompt), max_tokens, frozenset(), submitted, dict(wl.sampling))
        self.specs[rid] = spec
        self.intended[rid] = full
        if max_tokens == full:
            self.full_length.add(rid)
        self.send_lags.append(max(0.0, time.monotonic() - submitted))
        try:
            gen = self.frontend.submit(spec, list(prompt), {})
        except (Overloaded, Unavailable) as exc:
            self.num_refused += 1
            self.error = self.error or f"refused: {exc}"
            return False
        first, count = 0.0, 0
        while True:
            kind, value = await gen.events.get()
            if kind == "tokens":
                now = time.monotonic()
                self.arrivals.append((now, len(value)))
                first = first or now
                count += len(value)
            elif kind == "done":
                self.finished.add(rid)
                self.timings[rid] = (submitted, first or time.monotonic(), time.monotonic(), count)
                return True
            else:
                self.error = str(value)
                return False


class ClosedClient(Client):
    """N closed-loop sessions sharing one prompt cycle."""

    def __init__(self, frontend: FrontEnd, workload: ClientWorkload, tag: str, concurrency: int) -> None:
        super().__init__(frontend, workload, tag)
        self.concurrency = concurrency
        self.counter = itertools.count()

    def start(self, start: float) -> list[asyncio.Task[None]]:
        # Session i's first request is (i + 1)/N of its full length, so requests are spread over their lifetime
        # from the start (as in the steady state) instead of all being prefilled and finishing together.
        n = self.concurrency
        return [asyncio.create_task(self.session((i + 1) / n)) for i in range(n)]

    async def session(self, first_fraction: float) -> None:
        """Submit requests one after the other; the first is ``first_fraction`` of its drawn length."""
        fraction = first_fraction
        previous = None
        while True:
            k = next(self.counter)
            rid = self.request_id(k)
            if previous is not None:
                self.successor[previous] = rid
            previous = rid
            if not await self.send(k, fraction, time.monotonic()):
                return
            fraction = 1.0
