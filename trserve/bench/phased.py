"""A closed loop whose traffic changes in phases (issue #27): each phase sets the concurrency and, for requests
started in it, the routing, as the simulator's ``phases:`` do.

Client ``k`` sends while ``k`` is below the phase's concurrency; above it, it finishes the request it has (none is
cut short) and waits for a phase that needs it, so the loop grows at once and shrinks as requests end. With a
length preset every request is the bench's (:func:`trserve.bench.requests.request_body`: client ``k``'s ``i``-th
request has the same lengths in every run); its routing is a schedule walked on the phase's (P, C) for the
``schedule`` program, so a phase's statistics reach the server without touching its config. The server's
committed-token counter is read at every phase boundary: each phase's throughput is its own, and the thresholds
in force (``batching.thresholds: adaptive``) are read there too.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from trcore.errors import ConfigError
from trserve.bench.client import RequestRecord, Workload, _metrics, committed_tokens, metric_values
from trserve.bench.requests import request_body
from trserve.bench.stream import Connection, StreamError

Matrix = list[list[float]]


@dataclass(frozen=True)
class LoadPhase:
    """``duration_s`` of closed-loop traffic at ``concurrency``; ``routing`` (P, C): the requests started in it
    are walked on that chain (None: the workload's own)."""

    duration_s: float
    concurrency: int
    routing: tuple[Matrix, Matrix] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.duration_s < math.inf:
            raise ConfigError("phases.duration_s", f"must be finite and > 0, got {self.duration_s}")
        if self.concurrency < 1:
            raise ConfigError("phases.concurrency", f"must be >= 1, got {self.concurrency}")


def phase_at(phases: Sequence[LoadPhase], elapsed_s: float) -> int:
    """Index of the phase in force ``elapsed_s`` after the start (the last one past the end)."""
    end = 0.0
    for k, phase in enumerate(phases):
        end += phase.duration_s
        if elapsed_s < end:
            return k
    return len(phases) - 1


def phase_starts(phases: Sequence[LoadPhase]) -> list[float]:
    """Each phase's start, in seconds from the run's start, and the run's end last."""
    out = [0.0]
    for phase in phases:
        out.append(out[-1] + phase.duration_s)
    return out


async def _client(url: str, k: int, work: Workload, phases: Sequence[LoadPhase], start: float,
                  out: list[tuple[int, RequestRecord]]) -> None:  # fmt: skip
    """Client ``k``: sends while the phase in force needs it, else waits for the next phase."""
    assert work.lengths is not None
    bounds, conn, i = phase_starts(phases), Connection(url), 0
    try:
        while (now := time.perf_counter() - start) < bounds[-1]:
            p = phase_at(phases, now)
            if k >= phases[p].concurrency:
                await asyncio.sleep(bounds[p + 1] - now)
                conn.close()  # idle past the server's keep-alive timeout (uvicorn: 5 s): reconnect when needed
                continue
            body = request_body(work.lengths, k, i, phases[p].routing or work.routing)
            rec = RequestRecord(sent=time.perf_counter(), key=f"{k}.{i}", asked_tokens=int(body["max_tokens"]))
            try:
                await conn.stream(conn.request("/v1/completions", body), rec)
            except StreamError as exc:
                rec.error = str(exc)
            rec.done = time.perf_counter()
            out.append((p, rec))
            i += 1
    finally:
        conn.close()


#: Called with the bench's HTTP client and a phase's index at that phase's start (phase 0 before any request).
PhaseHook = Callable[[httpx.AsyncClient, int], Awaitable[None]]


@dataclass
class PhasedRun:
    """One phased run: per-phase summaries, every request (its phase, times on the bench's clock), the run's start
    on that clock, and the adaptive controller's ``/debug/state`` section before the start and at every phase's
    end (``adaptive``, read at ``adaptive_read_at`` on the bench's clock; empty without a controller)."""

    phases: list[dict[str, Any]]
    requests: list[tuple[int, RequestRecord]]
    start: float
    adaptive: list[dict[str, Any]] = field(default_factory=list)
    adaptive_read_at: list[float] = field(default_factory=list)

    def switch_times(self) -> list[float]:
        """The controller's switches, in seconds from the run's start (its clock mapped by the first reading)."""
        if not self.adaptive:
            return []
        offset = self.adaptive_read_at[0] - self.start - self.adaptive[0]["now_s"]
        return [s["time_s"] + offset for s in self.adaptive[-1]["switches"]]

    def controller_core_fraction(self) -> list[float]:
        """Per phase, the controller's CPU seconds over the seconds its clock ran (one core = 1.0)."""
        pairs = itertools.pairwise(self.adaptive)
        return [(b["cpu_s"] - a["cpu_s"]) / (b["now_s"] - a["now_s"]) for a, b in pairs if b["now_s"] > a["now_s"]]


async def run_phased_load(url: str, phases: Sequence[LoadPhase], work: Workload) -> list[dict[str, Any]]:
    """Run every phase once, back to back; per phase its span, concurrency, routing, committed tok/s, requests
    finished and failed, and the adaptive thresholds in force at its end (None without them)."""
    return (await run_phased(url, phases, work)).phases


async def run_phased(url: str, phases: Sequence[LoadPhase], work: Workload, on_phase: PhaseHook | None = None,
                     headers: dict[str, str] | None = None) -> PhasedRun:  # fmt: skip
    """:func:`run_phased_load` with every request kept, the controller's state read before the start and at every
    phase's end, and
    ``on_phase`` called at each phase's start (e.g. to set that phase's thresholds)."""
    if work.lengths is None:
        raise ConfigError("--lengths", "a phased load needs a length preset (each request's own lengths and routing)")
    records: list[tuple[int, RequestRecord]] = []
    bounds = phase_starts(phases)
    texts, states, read_at = [], [], []

    async def read_controller() -> None:
        state = await _adaptive(client)
        if state is not None:
            states.append(state)
            read_at.append(time.perf_counter())

    async with httpx.AsyncClient(base_url=url, timeout=600.0, headers=headers) as client:
        await read_controller()
        if on_phase is not None:
            await on_phase(client, 0)
        start = time.perf_counter()
        tasks = [asyncio.create_task(_client(url, k, work, phases, start, records))
                 for k in range(max(p.concurrency for p in phases))]  # fmt: skip
        texts.append(await _metrics(client))
        for k, end in enumerate(bounds[1:]):
            await asyncio.sleep(max(0.0, start + end - time.perf_counter()))
            texts.append(await _metrics(client))
            await read_controller()
            if on_phase is not None and k + 1 < len(phases):
                await on_phase(client, k + 1)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return PhasedRun(summarize_phases(phases, bounds, texts, records), records, start, states, read_at)


async def _adaptive(client: httpx.AsyncClient) -> dict[str, Any] | None:
    """The adaptive controller's section of ``/debug/state`` (None without one)."""
    response = await client.get("/debug/state")
    response.raise_for_status()
    state: dict[str, Any] | None = response.json().get("adaptive")
    return state


def summarize_phases(phases: Sequence[LoadPhase], bounds: Sequence[float], texts: Sequence[str],
                     records: Sequence[tuple[int, RequestRecord]]) -> list[dict[str, Any]]:  # fmt: skip
    """Per phase: committed tok/s between its two ``/metrics`` readings, the requests started in it that finished
    or failed, and the thresholds in force at its end."""
    out = []
    for k, phase in enumerate(phases):
        mine = [r for p, r in records if p == k and r.done is not None]
        thresholds = metric_values(texts[k + 1], "tokenrouter_adaptive_thresholds")
        out.append({
            "index": k, "start_s": bounds[k], "end_s": bounds[k + 1], "concurrency": phase.concurrency,
            "routing": None if phase.routing is None else {"P": phase.routing[0], "C": phase.routing[1]},
            "throughput_tok_s": committed_tokens(texts[k + 1], texts[k]) / phase.duration_s,
            "num_finished": sum(r.error is None for r in mine), "num_failed": sum(r.error is not None for r in mine),
            "failures": sorted({str(r.error) for r in mine if r.error is not None})[:3],
            "thresholds": [int(v) for v in thresholds.values()] or None,
        })  # fmt: skip
    return out


def phases_from_scenario(scenario_phases: Sequence[Any], concurrency: int, routing: tuple[Matrix, Matrix],
                         scale_s: float = 1.0) -> list[LoadPhase]:  # fmt: skip
    """A simulator scenario's phases (``trsim.scenario.scenario_phases``: its ``phases``, or the phases of its
    ``diurnal`` day) as load phases, durations times ``scale_s``; a phase without a value keeps the one in force
    before it. The load's lengths are the bench preset's, so a phase's ``output_tokens`` is refused."""
    if not scenario_phases:
        raise ConfigError("phases", "none given (a diurnal day: pass trsim.scenario.scenario_phases(scenario))")
    out, P, C, n = [], routing[0], routing[1], concurrency
    for k, spec in enumerate(scenario_phases):
        if spec.output_tokens is not None:
            raise ConfigError(f"phases[{k}].output_tokens", "a phased load sends its length preset's lengths")
        if spec.router is not None:
            P, C = spec.router.P or P, spec.router.C or C
        n = spec.concurrency or n
        out.append(LoadPhase(spec.duration_s * scale_s, n, (P, C)))
    return out
