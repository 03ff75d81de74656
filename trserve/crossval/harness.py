"""The real side of cross-validation: the local server's processes (launcher, front end, subserver loops, engines)
without HTTP, reconfigured between cells, driven by a client in this process (``trserve.crossval.client``).

A cell = (router, load, thresholds B); the load is closed loop (N requests kept in flight, a finished request
replaced at once by the next prompt) or open loop (requests sent at Poisson arrival times,
``trserve.crossval.open_client``). The client counts committed output tokens as they arrive, and after the
measured window the harness aborts what is still running. Routing events recorded on every model come back with
the next reconfiguration and become per-request traces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trcore import BatchingPolicy, RouteEvent
from trcore.errors import ConfigError
from trcore.traces import RequestTrace, traces_from_events
from trserve.bench.arrivals import Arrivals
from trserve.config import RestartConfig, ServeConfig
from trserve.crossval.client import Client, ClientWorkload, ClosedClient
from trserve.crossval.messages import ProgramChoice, Reconfigure, TraceDump
from trserve.crossval.open_client import OpenClient
from trserve.frontend.book import FrontEnd
from trserve.runtime.messages import StepReport
from trserve.server.launch import Launcher
from trserve.server.serve import resolve, start_frontend
from trsim.breakdown import Breakdown, breakdowns

#: Names model ``m``'s routing program for a cell (its worker builds a fresh instance: routers hold RNG state).
ProgramFactory = Callable[[int], ProgramChoice]


@dataclass(frozen=True)
class StepRecord:
    """One engine step as the front end saw it: when, on which model, batch size, engine time, fed tokens and
    the hand-offs to other models it made."""

    time: float
    model: int
    batch_size: int
    step_s: float
    num_new_tokens: int
    num_handoffs: int = 0
    #: Hand-off messages this model received since its previous step, and their summed transit (seconds).
    handoffs_received: int = 0
    handoff_transit_s: float = 0.0
    handoffs_late: int = 0
    #: Seconds the loop spent since the previous step ended, when it went straight on (None after it idled).
    host_gap_s: float | None = None
    #: ``backend: emulated``: the latency the step was given (None for other engines).
    emulated_s: float | None = None
    #: The core's KV accounting after the step (cumulative counters; empty without accounting).
    memory: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, report: StepReport, at: float) -> StepRecord:
        """The record of ``report``, received at ``at``: its fields of the same names (every field but ``time``)."""
        return cls(at, **{name: getattr(report, name) for name in _REPORTED})


#: The fields a :class:`StepRecord` takes from its :class:`StepReport`.
_REPORTED = tuple(f.name for f in dataclasses.fields(StepRecord) if f.name != "time")


class CrossvalFrontEnd(FrontEnd):
    """The server's front end, which also keeps every step report and answers reconfiguration replies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_log: list[StepRecord] = []
        self._dumps: dict[tuple[int, int], asyncio.Future[TraceDump]] = {}
        self._dump_tokens = itertools.count()

    def handle(self, msg: Any) -> None:
        if isinstance(msg, TraceDump):
            fut = self._dumps.pop((msg.model, msg.token), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            return
        if isinstance(msg, StepReport):
            self.step_log.append(StepRecord.of(msg, time.monotonic()))
        super().handle(msg)

    async def reconfigure(self, model: int, timeout_s: float = 60.0, **changes: Any) -> TraceDump:
        """Send :class:`Reconfigure` to ``model`` and wait for its trace dump."""
        token = next(self._dump_tokens)
        fut: asyncio.Future[TraceDump] = asyncio.get_running_loop().create_future()
        self._dumps[(model, token)] = fut
        self.send(model, Reconfigure(token, **changes))
        return await asyncio.wait_for(fut, timeout_s)


@dataclass
class CellRun:
    """What one real cell measured: tokens in the window, its length, traces of finished full-length requests,
    all traces (shortened first requests, and requests cut off at the end, included), the window's steps, each
    request's drawn full output length (before a session's first request is shortened), the full-length
    requests' ids, and per finished full-length request (submitted, first token, done, output tokens) on the
    monotonic clock."""

    throughput_tok_s: float
    num_tokens: int
    measured_s: float
    finished: list[RequestTrace]
    traces: list[RequestTrace]
    steps: list[StepRecord]
    num_finished: int
    intended_tokens: dict[str, int] = field(default_factory=dict)
    full_length_ids: frozenset[str] = frozenset()
    latencies: list[tuple[float, float, float, int]] = field(default_factory=list)
    #: Per request that finished and was followed by its session's next: seconds from the end of its last step
    #: (the model's clock) to the next one's submission (the client's; one machine's monotonic clock).
    turnarounds: list[float] = field(default_factory=list)
    #: Per finished full-length request, where its latency went (``trsim.breakdown``).
    breakdowns: list[Breakdown] = field(default_factory=list)
    #: Open loop: arrivals in the measured window per second (None: closed loop).
    offered_rps: float | None = None
    #: Per request sent: seconds from its arrival time to the client's submit call (an open loop's timer and task
    #: wake-up on the busy event loop; about 0 in a closed loop, which submits when it decides to).
    send_lags: list[float] = field(default_factory=list)


@asynccontextmanager
async def crossval_server(cfg: ServeConfig) -> AsyncIterator[CrossvalFrontEnd]:
    """Start the config's subservers (crossval workers) and a front end; stop them all on exit."""
    if max(cfg.replicas) > 1:  # a cell reconfigures "model m" as one process
        raise ConfigError("models.replicas", "crossval runs one replica of each model; set replicas: 1")
    run_dir = tempfile.mkdtemp(prefix="tokenrouter-crossval-")
    try:  # the checks of resolve() need the run folder's paths; a refused config leaves no empty folder behind
        spec, workers = resolve(cfg, run_dir)
        workers = [replace(w, role="crossval-subserver") for w in workers]
        frontend, metrics = start_frontend(cfg, spec, CrossvalFrontEnd, cfg.entry_model)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    launcher = Launcher(spec, workers, Path(run_dir), frontend, metrics, RestartConfig(enabled=False))
    is_clean = False
    try:
        await launcher.start_all(cfg.server.startup_timeout_s)
        yield frontend
        is_clean = True
    except BaseException as exc:
        exc.add_note(f"crossval: the workers' logs are in {run_dir}")
        raise
    finally:
        await launcher.stop_all()
        await frontend.close()
        if is_clean:
            shutil.rmtree(run_dir, ignore_errors=True)


async def run_cell(
    frontend: CrossvalFrontEnd,
    programs: ProgramFactory,
    policies: Sequence[BatchingPolicy],
    load: int | Arrivals,
    workload: ClientWorkload,
    tag: str,
) -> CellRun:
    """Run one cell on a server that holds no request, closed loop (``load``: N sessions) or open loop (``load``:
    the arrival times); leaves it holding none."""
    num_models = len(policies)
    for m in range(num_models):
        await frontend.reconfigure(m, policy=policies[m], program=programs(m), record_trace=True)
    frontend.step_log.clear()
    if isinstance(load, Arrivals):
        client: Client = OpenClient(frontend, workload, tag, load)
    else:
        client = ClosedClient(frontend, workload, tag, load)
    start = time.monotonic()
    tasks = client.start(start)
    try:
        await asyncio.sleep(workload.warmup_s + workload.measure_s)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for rid in list(frontend.generations):
            frontend.abort(rid)
    events: list[RouteEvent] = []
    for m in range(num_models):
        dump = await frontend.reconfigure(m, record_trace=False)
        events.extend(RouteEvent(*e) for e in dump.events)
    if client.num_refused:
        raise ConfigError(
            "--rate" if isinstance(load, Arrivals) else "--concurrency",
            f"cell {tag}: the server refused {client.num_refused} requests ({client.error}): the load is beyond what "
            "it queues; lower it, or raise server.max_waiting_requests",
        )
    if client.error is not None:
        raise RuntimeError(f"cell {tag}: a request failed: {client.error}")
    window = (start + workload.warmup_s, start + workload.warmup_s + workload.measure_s)
    traces = traces_from_events(events, client.specs)
    num_tokens = sum(n for t, n in client.arrivals if window[0] <= t < window[1])
    full = client.finished & client.full_length
    times = {rid: client.timings[rid][:3] for rid in full if rid in client.timings}
    return CellRun(
        throughput_tok_s=num_tokens / workload.measure_s,
        num_tokens=num_tokens,
        measured_s=workload.measure_s,
        finished=[t for t in traces if t.request_id in full],
        traces=traces,
        steps=[s for s in frontend.step_log if window[0] <= s.time < window[1]],
        num_finished=len(client.finished),
        intended_tokens=dict(client.intended),
        full_length_ids=frozenset(client.full_length),
        latencies=[client.timings[rid] for rid in sorted(full) if rid in client.timings],
        turnarounds=turnarounds(events, client),
        breakdowns=breakdowns(events, times, num_models),
        offered_rps=load.rate_rps(*(t - start for t in window)) if isinstance(load, Arrivals) else None,
        send_lags=list(client.send_lags),
    )


def turnarounds(events: Sequence[RouteEvent], client: Client) -> list[float]:
    """For every finished request its session followed with another: from its last step's end to that one's
    submission."""
    ended: dict[str, float] = {}
    for event in events:
        ended[event.request_id] = max(event.time, ended.get(event.request_id, event.time))
    pairs = [(ended.get(done), client.specs[nxt].arrival_time) for done, nxt in client.successor.items()]
    return [submitted - end for end, submitted in pairs if end is not None]
