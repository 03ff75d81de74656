"""Messages between the front end and subservers (besides ``trcore.PeerReq``, which carries requests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trcore import PeerReq

#: Routing-extra key that numbers a request's incarnations: 0 as admitted, one more at each resume after a crash.
#: Subservers drop hand-offs of an incarnation they were told to abort, and accept a later one.
INCARNATION = "trserve_incarnation"


#: Routing-extra key of a request the front end resumes after a crash on a process that steps every model (the
#: lockstep driver, the per-token dispatcher): the model that continues it (its last step's route). That process
#: receives it on that model, as the routed mode sends it to that model's process.
RESUME_MODEL = "trserve_resume_model"


def resume_model(msg: PeerReq, entry: int) -> tuple[int, PeerReq]:
    """Where a process that steps every model receives a request from the front end: a new one on ``entry``, one
    resumed after a crash on the model its :data:`RESUME_MODEL` names; and the request without that key."""
    extra = dict(msg.extra)
    model = int(extra.pop(RESUME_MODEL, entry))
    return model, replace(msg, extra=extra)


def incarnation_of(extra: Mapping[str, Any]) -> int:
    return int(extra.get(INCARNATION, 0))


@dataclass(frozen=True)
class Abort:
    """Forget a request on this model and free its KV (client gone, stop string hit, a peer failed); hand-offs of
    this ``incarnation`` or an earlier one that arrive later are dropped."""

    request_id: str
    incarnation: int = 0


@dataclass(frozen=True)
class Handoffs:
    """The hand-offs and releases of one step for one process, in the order the step made them, as one message
    (one send per destination per step instead of one per request: at N = 64 a small model hands off a third of
    a batch of about 18 at once, and each send was a ZeroMQ call and a wake-up of its I/O thread)."""

    requests: tuple[PeerReq, ...]
    #: When the sender sent it (``time.time()``): the receiver measures the transit (across nodes this includes
    #: the nodes' clock offset).
    sent_at: float = 0.0


@dataclass(frozen=True)
class Rewire:
    """Process ``model`` listens at ``address`` (it restarted, or reported its inbox at start)."""

    model: int
    address: str


@dataclass(frozen=True)
class Active:
    """The count this subserver's threshold table keys on, sent by the front end whenever it changes
    (:mod:`trserve.frontend.counts`): every active request of the system, or with replicas the requests pinned to
    this process."""

    count: int


@dataclass(frozen=True)
class Thresholds:
    """A new threshold vector (one per model) from the adaptive controller: the subserver takes its model's entry
    and its peers' slack, drops its table, and applies it at its next launch (a step boundary)."""

    vector: tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    """Ask a subserver for its :class:`State` now (``detail``: also count live Python objects, ~0.1 s)."""

    token: int
    detail: bool = False


@dataclass(frozen=True)
class Shutdown:
    """Stop the loop, release the engine and exit."""


@dataclass(frozen=True)
class Ready:
    """A worker is up (``model``: its process index; in the routed mode with one replica per model, its model) and
    its inbox is bound at ``address``; ``kv_usage`` is its engine's idle KV usage (the baseline)."""

    model: int
    pid: int
    kv_usage: float
    signals: tuple[str, ...] = ()
    address: str = ""
    #: Tokens of context its KV cache holds in all (0: not known, no limit enforced).
    kv_capacity_tokens: int = 0


@dataclass(frozen=True)
class Finished:
    """A request ended on the model that stepped it last; ``token_ids`` is its whole output."""

    request_id: str
    token_ids: tuple[int, ...]
    reason: str  # "stop" or "length"


@dataclass(frozen=True)
class Failed:
    """A request could not continue (engine error); the front end aborts it everywhere."""

    request_id: str
    message: str


#: Where a request goes on after a step: ``(request_id, model, num_output_tokens, routing extra or None)``.
Route = tuple[str, int, int, dict[str, Any] | None]


@dataclass(frozen=True)
class StepReport:
    """What one step of one model produced, for streaming and metrics.

    ``tokens`` lists ``(request_id, offset, token_ids)``: output tokens committed from output position
    ``offset`` on (the front end reassembles them in order, whichever model sent them). ``routes`` says, per
    request still live, which model continues it and with what routing state: where to resume it after a
    crash."""

    model: int
    batch_size: int
    num_new_tokens: int
    step_s: float
    num_ready: int
    num_resident: int
    num_handoffs: int
    kv_usage: float
    tokens: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    #: ``backend: emulated``: the latency the step was given, and the CPU its wait cost (the final spin).
    emulated_s: float | None = None
    wait_cpu_s: float = 0.0
    #: Which replica of ``model`` stepped (``models[].replicas``; 0 with one copy of each model).
    replica: int = 0
    #: Hand-off messages this process received since its previous report, their summed transit beyond the step
    #: in progress (seconds) and how many missed a launch (:class:`trserve.runtime.reports.LoopStats`).
    handoffs_received: int = 0
    handoff_transit_s: float = 0.0
    handoffs_late: int = 0
    #: Seconds the loop spent between the end of the previous step and the start of this one when it went straight
    #: on (requests were ready); None after the loop idled. Host time the engine waited on.
    host_gap_s: float | None = None
    #: KV accounting of the core (:func:`trserve.runtime.reports.memory_fields`): blocks in all, used, parked;
    #: cumulative spills, preemptions, recomputed tokens, admission waits. Empty without accounting.
    memory: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """A subserver's answer to :class:`Probe`: resident requests, KV usage and resident memory."""

    model: int
    token: int
    pid: int
    num_resident: int
    num_ready: int
    kv_usage: float
    rss_bytes: int
    num_steps: int
    engine: dict[str, object] = field(default_factory=dict)
    #: Messages its inbox took, by class name, and ``bad`` ones it dropped (:mod:`trserve.runtime.transport`).
    received: dict[str, int] = field(default_factory=dict)
    replica: int = 0
    memory: dict[str, int] = field(default_factory=dict)
    #: Its batching policy's threshold in force (before the clamp by active count; 0: no policy).
    threshold: int = 0
    #: The requests it holds ready to step (queued for a batch or for KV memory): the stall watchdog's evidence
    #: that a request no step has moved for a while is waiting its turn, not lost.
    queued: tuple[str, ...] = ()
    #: A driver holding several models' schedulers (``lockstep``): each model's KV accounting, as ``memory``.
    memory_by_model: dict[int, dict[str, int]] = field(default_factory=dict)


# -- baselines: a driver process talking to engine-only worker processes ---------------------------------------


@dataclass(frozen=True)
class StepCall:
    """Lockstep: run one ``StepEngine.step`` on these items (``(request_id, new_token_ids, sampling)``); with no
    items, only report the engine's KV budget."""

    call_id: int
    items: list[tuple[str, list[int], dict[str, object]]]


@dataclass(frozen=True)
class StepReply:
    """The answer to :class:`StepCall`: one ``(token_id, top_logprobs, entropy)`` per item, or an error."""

    call_id: int
    outputs: list[tuple[int, dict[int, float], float | None]]
    step_s: float
    kv_usage: float
    error: str | None = None
    #: ``backend: emulated``: as in :class:`StepReport`.
    emulated_s: float | None = None
    wait_cpu_s: float = 0.0
    #: The answer to a call with no items: the engine's KV cache as ``(blocks, block_size, max_seqs)`` (0: no
    #: limit on sequences), None when its memory is free (the hash stand-in, an emulated engine without a pool).
    kv_budget: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class Release:
    """Free these requests in an engine worker."""

    request_ids: list[str]


@dataclass(frozen=True)
class OneToken:
    """Per-token baseline: sample one token after ``token_ids`` (the whole sequence) as a new request."""

    request_id: str
    seq_no: int
    token_ids: list[int]
    sampling: dict[str, object]


@dataclass(frozen=True)
class TokenReply:
    """The answer to :class:`OneToken`."""

    request_id: str
    seq_no: int
    token_id: int
    top_logprobs: dict[int, float]
    entropy: float | None
    latency_s: float
