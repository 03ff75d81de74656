"""Workloads: closed loop with N concurrent sessions, open loop with Poisson arrivals or replayed arrival times;
multi-turn sessions; presets named after the paper's workloads."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from numbers import Integral
from typing import Any, Literal, Protocol

import simpy

from trcore import ConfigError, PeerReq, RequestSpec, new_request_message
from trcore.routers import TRACE_KEY
from trsim.clock import TICKS_PER_S, to_ticks
from trsim.lengths import LengthDist, LengthPairs, constant, lognormal

#: Output length standing for "never finishes": makes the closed loop the throughput model's chain.
ENDLESS = 10**15
#: ``Request.extra`` key of a follow-up turn: per model, how many leading tokens it still holds from the
#: previous turns (prefix cache); the latency model does not charge their prefill.
PREFIX_KEY = "prefix_cached"


@dataclass(frozen=True)
class WorkloadConfig:
    """Where requests come from and how long they are.

    * ``arrival``: ``closed`` keeps ``concurrency`` sessions in flight (a finished one is replaced at once);
      ``poisson`` starts sessions at ``rate_per_s``; ``trace`` starts one session at each of ``arrival_times_s``
      (seconds from the run's start, sorted, >= 0: a measured run's own arrivals), drawn as ``poisson`` draws them;
    * ``num_sessions``: stop starting sessions after this many (None: no limit; the run ends by tokens or time);
    * lengths from ``prompt_tokens`` / ``output_tokens``, or cycled from ``pairs`` (a lengths file, a trace);
    * ``think_time_s``: a client's pause between the end of one of its requests and its next: a session's next
      turn, and in the closed loop the next session (the client's turnaround);
    * ``turns``: requests per session; a follow-up turn's prompt is the previous context plus
      ``turn_prompt_tokens`` new tokens and starts ``think_time_s`` after the previous turn ends; with
      ``prefix_cache`` each model's prefix cache still holds what it had consumed of the previous turns, so
      that part is not prefilled again (see ``trsim.latency.PrefixCachedModel``);
    * ``tag_traces``: session k replays trace ``k mod len(pairs)`` (trace-replay routing);
    * ``pair_offset``: session k takes pair (and trace) ``k + pair_offset`` instead (another assignment of the
      same pairs to the same arrivals);
    * ``pairs_by_client`` (closed loop): ``pairs`` hold each client's requests in turn, client i's k-th at
      ``k * concurrency + i`` (a bench's order), and a client's next request is its own next one (by default the
      next session takes the next unstarted pair, whichever client finished);
    * ``staggered_start`` (closed loop): session i of the first ``concurrency`` writes (i + 1) / concurrency of its
      first request's drawn output, so requests end, and their successors start, spread over a lifetime: the
      steady state's mix of young and old requests instead of a synchronized wave (crossval's real client does
      the same).
    * ``max_active`` (open loop): at most this many requests in flight, as a server's admission limit
      (``server.max_active_requests``) holds them; later arrivals wait in arrival order for a slot, and their
      TTFT and end-to-end latency count from their arrival. None: every arrival is admitted at once.
    """

    arrival: Literal["closed", "poisson", "trace"] = "closed"
    concurrency: int = 16
    rate_per_s: float = 1.0
    arrival_times_s: tuple[float, ...] = ()
    num_sessions: int | None = None
    prompt_tokens: LengthDist = field(default_factory=lambda: constant(100))
    output_tokens: LengthDist = field(default_factory=lambda: constant(ENDLESS))
    pairs: LengthPairs | None = None
    turns: int = 1
    turn_prompt_tokens: LengthDist = field(default_factory=lambda: constant(200))
    think_time_s: float = 0.0
    prefix_cache: bool = True
    tag_traces: bool = False
    staggered_start: bool = False
    max_active: int | None = None
    pairs_by_client: bool = False
    pair_offset: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, Integral):  # range() would raise
            raise ConfigError("workload.concurrency", f"must be a whole number, got {self.concurrency!r}")
        positive = {"concurrency": self.concurrency, "rate_per_s": self.rate_per_s, "turns": self.turns}
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"workload.{name}", f"must be > 0, got {value}")
        if self.num_sessions is not None and self.num_sessions < 1:
            raise ConfigError("workload.num_sessions", f"must be >= 1, got {self.num_sessions}")
        if self.think_time_s < 0:
            raise ConfigError("workload.think_time_s", f"must be >= 0, got {self.think_time_s}")
        if self.max_active is not None and (self.max_active < 1 or self.arrival == "closed"):
            raise ConfigError("workload.max_active", "an open loop's admission limit, >= 1 (a closed loop's is its "
                              f"concurrency); got {self.max_active} with arrival {self.arrival!r}")  # fmt: skip
        if self.tag_traces and self.pairs is None:
            raise ConfigError("workload.tag_traces", "needs length pairs taken from the traces")
        if self.pairs_by_client and (self.pairs is None or self.arrival != "closed" or self.turns > 1):
            raise ConfigError("workload.pairs_by_client", "needs length pairs in a closed loop of one-turn sessions")
        if self.arrival == "trace":  # stored as a tuple of floats, so the config stays hashable
            object.__setattr__(self, "arrival_times_s", check_arrival_times(self.arrival_times_s))
        elif self.arrival_times_s:
            raise ConfigError("workload.arrival_times_s", f"replayed with arrival 'trace' only, not {self.arrival!r}")

    @property
    def is_finite(self) -> bool:
        """True when the workload starts a limited number of sessions (a run may go until they are done)."""
        return self.num_sessions is not None or self.arrival == "trace"


def check_arrival_times(given: Sequence[float]) -> tuple[float, ...]:
    """``arrival_times_s`` as a tuple of seconds; an empty, negative, non-finite or decreasing one is refused
    (naming the field)."""
    name = "workload.arrival_times_s"
    try:
        times = tuple(float(t) for t in given)
    except (TypeError, ValueError):
        raise ConfigError(name, f"must be numbers (seconds from the run's start), got {given!r}") from None
    if not times:
        raise ConfigError(name, "needs at least one arrival time (seconds from the run's start)")
    for k, t in enumerate(times):
        if not (math.isfinite(t) and t >= 0):
            raise ConfigError(name, f"times must be finite and >= 0, got {t!r} at index {k}")
        if k and t < times[k - 1]:
            raise ConfigError(name, f"times must be sorted: {t!r} at index {k} comes before {times[k - 1]!r}")
    return times


PRESETS: dict[str, WorkloadConfig] = {
    # Short reasoning: ~100-token prompts, reasoning outputs up to 2,048 tokens.
    "short-reasoning": WorkloadConfig(
        prompt_tokens=lognormal(100, 0.4, maximum=1024, minimum=8),
        output_tokens=lognormal(1200, 0.6, maximum=2048, minimum=16),
    ),
    # Long reasoning: same prompts, outputs up to 8,192 tokens.
    "long-reasoning": WorkloadConfig(
        prompt_tokens=lognormal(100, 0.4, maximum=1024, minimum=8),
        output_tokens=lognormal(5000, 0.6, maximum=8192, minimum=64),
    ),
    # The CPU pair's reasoning answers: the same prompts (at most 256 tokens), outputs of 256 to 1,024 tokens.
    "short-reasoning-cpu": WorkloadConfig(
        prompt_tokens=lognormal(100, 0.4, maximum=256, minimum=8),
        output_tokens=lognormal(512, 0.4, maximum=1024, minimum=256),
    ),
    # Agentic: ~8,192-token context, short outputs up to 1,024, four turns with tool output in between.
    "agentic": WorkloadConfig(
        prompt_tokens=lognormal(8192, 0.25, maximum=16384, minimum=1024),
        output_tokens=lognormal(400, 0.7, maximum=1024, minimum=8),
        turns=4,
        turn_prompt_tokens=lognormal(600, 0.8, maximum=4096, minimum=16),
    ),
    # Requests that never finish: the closed loop is then exactly the throughput model's chain.
    "endless": WorkloadConfig(prompt_tokens=constant(16), output_tokens=constant(ENDLESS)),
}


def preset(name: str, **overrides: Any) -> WorkloadConfig:
    """A named preset, with fields replaced by ``overrides``; unknown names list the valid ones."""
    if name not in PRESETS:
        raise ConfigError("workload.preset", f"unknown preset {name!r}; valid: {', '.join(sorted(PRESETS))}")
    return replace(PRESETS[name], **overrides)


class Submitter(Protocol):
    """What the workload needs from the driver."""

    env: simpy.Environment

    def submit(self, message: PeerReq, now: float, arrived: float | None = None) -> None: ...

    def now_s(self) -> float: ...


@dataclass
class _Session:
    index: int
    turn: int
    context_tokens: int
    anchors: tuple[int, ...]


class WorkloadRunner:
    """Starts sessions and their turns on a driver (``Submitter``), and reacts to finished requests."""

    def __init__(self, config: WorkloadConfig, driver: Submitter, num_models: int, rng: random.Random) -> None:
        self.config = config
        self.driver = driver
        self.num_models = num_models
        self.rng = rng
        self.num_started = 0
        self._sessions: dict[str, _Session] = {}
        self._held: deque[tuple[PeerReq, float]] = deque()  # arrivals waiting for a slot (``max_active``)

    @property
    def num_held(self) -> int:
        """Arrivals waiting for an admission slot (``max_active``)."""
        return len(self._held)

    @property
    def is_exhausted(self) -> bool:
        """True when no more sessions will start."""
        cfg = self.config
        limit = cfg.num_sessions
        if cfg.arrival == "trace":
            limit = min(limit or len(cfg.arrival_times_s), len(cfg.arrival_times_s))
        return limit is not None and self.num_started >= limit

    def start(self) -> None:
        """Start the sessions or arrivals, once (a Simulation's second run stepped its spent run forever)."""
        if self.num_started:
            raise ConfigError("run", "a Simulation runs once: build a new one for another run")
        if self.config.arrival == "closed":
            for _ in range(self.config.concurrency):
                self._start_session()
        elif self.config.arrival == "trace":
            self.driver.env.process(self._replayed_arrivals())
        else:
            self.driver.env.process(self._poisson_arrivals())

    def on_finish(self, message: PeerReq, now: float) -> None:
        """A request finished: start the session's next turn, or (closed loop) a new session."""
        session = self._sessions.pop(message.request_id)
        if self._held:
            held, arrived = self._held.popleft()
            self._admit(held, arrived)
        if session.turn + 1 < self.config.turns:
            session.turn += 1
            session.context_tokens = message.start + len(message.token_ids)
            session.anchors = message.anchors
            self._after(self.config.think_time_s, lambda: self._submit_turn(session))
        elif self.config.arrival == "closed":
            index = session.index + self.config.concurrency if self.config.pairs_by_client else None
            self._after(self.config.think_time_s, lambda: self._start_session(index))

    def _poisson_arrivals(self) -> Generator[simpy.Event, Any, None]:
        while not self.is_exhausted:
            self._start_session()
            yield self.driver.env.timeout(to_ticks(self.rng.expovariate(self.config.rate_per_s)))

    def _replayed_arrivals(self) -> Generator[simpy.Event, Any, None]:
        """One session at each arrival time (whole ticks from the run's start; equal times at the same instant)."""
        env = self.driver.env
        for t in self.config.arrival_times_s:
            delay = round(t * TICKS_PER_S) - env.now
            if delay > 0:
                yield env.timeout(delay)
            if self.is_exhausted:
                return
            self._start_session()

    def _start_session(self, index: int | None = None) -> None:
        """Start a session: ``index`` picks its pair (None: the next unstarted one)."""
        if self.is_exhausted:
            return
        session = _Session(self.num_started if index is None else index, 0, 0, (0,) * self.num_models)
        self.num_started += 1
        self._submit_turn(session)

    def _submit_turn(self, session: _Session) -> None:
        cfg = self.config
        if cfg.pairs is not None:
            num_prompt, num_output = cfg.pairs.pair(session.index + cfg.pair_offset)
        else:
            num_prompt, num_output = cfg.prompt_tokens.sample(self.rng), cfg.output_tokens.sample(self.rng)
        if session.turn > 0:
            num_prompt = session.context_tokens + cfg.turn_prompt_tokens.sample(self.rng)
        elif cfg.staggered_start and cfg.arrival == "closed" and session.index < cfg.concurrency:
            num_output = max(1, math.ceil(num_output * (session.index + 1) / cfg.concurrency))
        rid = f"s{session.index}" if cfg.turns == 1 else f"s{session.index}.t{session.turn}"
        spec = RequestSpec(rid, num_prompt, num_output, arrival_time=self.driver.now_s())
        message = new_request_message(spec, [1] * num_prompt, self.num_models)
        extra: dict[str, Any] = {}
        if session.turn > 0 and cfg.prefix_cache:
            extra[PREFIX_KEY] = session.anchors
        if cfg.tag_traces and cfg.pairs is not None:
            extra[TRACE_KEY] = (session.index + cfg.pair_offset) % len(cfg.pairs.pairs)
        if extra:
            message = replace(message, extra=extra)
        self._sessions[rid] = session
        self._admit(message, spec.arrival_time)

    def _admit(self, message: PeerReq, arrived: float) -> None:
        """Submit ``message`` (arrived at ``arrived``) now, or hold it while ``max_active`` are in flight."""
        limit = self.config.max_active
        in_flight = len(self._sessions) - len(self._held) - 1  # sessions hold every request, this one too
        if limit is not None and in_flight >= limit:
            self._held.append((message, arrived))
            return
        self.driver.submit(message, self.driver.now_s(), arrived)

    def _after(self, delay_s: float, action: Callable[[], None]) -> None:
        if delay_s <= 0:
            action()
            return
        timeout = self.driver.env.timeout(to_ticks(delay_s))
        timeout.callbacks.append(lambda _event: action())
