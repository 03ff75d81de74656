"""Requests as one subserver sees them, and the messages (PeerReq) that move them between models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

#: Destination index meaning "back to the client" (the request finished or must be reported).
CLIENT = -1


class RequestStatus(IntEnum):
    """Where a request stands on one model; ordered so ``status >= FINISHED`` is one comparison."""

    WAITING = 0  #: ready on this model, waiting for a step
    RUNNING = 1  #: inside this model's running step
    PENDING = 2  #: resident here (KV kept) while a peer model continues it
    FINISHED = 3  #: done; resources may be released


@dataclass(frozen=True)
class RequestSpec:
    """What never changes about a request; travels only on a model's first visit.

    A stop token ends the request only once it has more than ``min_tokens`` output tokens (vLLM's meaning:
    the first ``min_tokens`` tokens cannot stop it); ``max_tokens`` always does."""

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    arrival_time: float = 0.0
    sampling: Mapping[str, Any] = field(default_factory=dict)
    min_tokens: int = 0


@dataclass
class Request:
    """One request's state on one subserver.

    ``token_ids`` holds prompt and output together. ``anchors[m]`` counts how many leading tokens of that
    sequence model ``m`` has consumed (holds in its KV cache); what model ``m`` still has to read is
    ``token_ids[anchors[m]:]``.
    """

    spec: RequestSpec
    token_ids: list[int]
    anchors: list[int]
    status: RequestStatus = RequestStatus.WAITING
    ready_since: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    num_reported: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    #: Its length after its last step here, and how many of its steps here in a row found it no longer since
    #: (every token dropped, none kept elsewhere): a routing program that never keeps one is a bug, not a wait.
    num_tokens_seen: int = 0
    steps_without_token: int = 0

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.spec.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.spec.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED

    def num_unseen(self, model: int) -> int:
        """Tokens model ``model`` still has to read (prefill / extend work of its next step)."""
        return len(self.token_ids) - self.anchors[model]

    def has_reached_stop(self) -> bool:
        """True when the output is as long as allowed, or ends with a stop token past ``min_tokens``."""
        if self.num_output_tokens >= self.spec.max_tokens:
            return True
        return self.num_output_tokens > self.spec.min_tokens and self.token_ids[-1] in self.spec.stop_token_ids

    def take_unreported(self) -> list[int]:
        """Committed output tokens not yet handed to the client (for streaming); marks them reported."""
        start = self.spec.num_prompt_tokens + self.num_reported
        new = self.token_ids[start:]
        self.num_reported += len(new)
        return new


@dataclass(frozen=True, init=False)
class PeerReq:
    """A hand-off: what the receiving model needs to continue (or to release) a request.

    ``token_ids`` are the tokens from position ``start`` (the receiver's anchor) onward; ``anchors`` is the
    sender's up-to-date view of every model's anchor. ``spec`` is set when the receiver has never seen the
    request. ``is_finished`` tells the receiver to release it.
    """

    request_id: str
    start: int
    token_ids: tuple[int, ...]
    anchors: tuple[int, ...]
    origin: int
    spec: RequestSpec | None = None
    is_finished: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        request_id: str,
        start: int,
        token_ids: tuple[int, ...],
        anchors: tuple[int, ...],
        origin: int,
        spec: RequestSpec | None = None,
        is_finished: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # A frozen dataclass's own __init__ sets each field through object.__setattr__; writing the instance
        # dict directly is about twice as fast, and a hand-off is built for every routed token.
        fields = self.__dict__
        fields["request_id"] = request_id
        fields["start"] = start
        fields["token_ids"] = token_ids
        fields["anchors"] = anchors
        fields["origin"] = origin
        fields["spec"] = spec
        fields["is_finished"] = is_finished
        fields["extra"] = {} if extra is None else extra

    @property
    def end(self) -> int:
        """Length of the sequence after the receiver appends ``token_ids``."""
        return self.start + len(self.token_ids)


def new_request_message(spec: RequestSpec, prompt_token_ids: Sequence[int], num_models: int) -> PeerReq:
    """The message a client (front end, workload generator) sends to the entry model."""
    if len(prompt_token_ids) != spec.num_prompt_tokens:
        raise ValueError("prompt length differs from spec.num_prompt_tokens")
    return PeerReq(
        request_id=spec.request_id,
        start=0,
        token_ids=tuple(prompt_token_ids),
        anchors=(0,) * num_models,
        origin=CLIENT,
        spec=spec,
    )
