"""How a request's tokens reach the engine for one step: a kept streaming session, or abort-and-re-add.

* ``session`` (default): the request is a vLLM *resumable* request. Each step adds a chunk with the tokens the
  engine has not consumed and ``max_tokens=1``; vLLM appends them after the tokens whose KV it holds (the
  previous chunk's last sampled token is discarded by vLLM, and the scheduler re-sends it when it was kept),
  samples one token and parks the request in ``WAITING_FOR_STREAMING_REQ`` with its KV cache kept. A parked
  request is never scheduled, so only the requests passed to ``StepEngine.step`` run.
* ``readmit`` (fallback): every step adds a fresh one-token request with the whole sequence; vLLM frees it after
  its token, and prefix caching gives back every full KV block on the next visit (the partial last block and
  the new tokens are recomputed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trcore.errors import ConfigError
from trserve.engine.core_link import CoreLink, sampling_params
from trserve.engine.types import HANDOFF_MODE_NAMES


@dataclass
class Resident:
    """One request as this engine holds it: its id inside vLLM and every token it has been fed (its context)."""

    engine_id: str
    context: list[int] = field(default_factory=list)
    in_engine: bool = False  #: vLLM holds state (a parked session) that release() must free


class SessionHandoff:
    """Keep the request in vLLM as a streaming-input session; append only the unseen tokens."""

    name = "session"

    def __init__(self, top_logprobs: int) -> None:
        self.top_logprobs = top_logprobs

    def submit(self, link: CoreLink, res: Resident, new_tokens: list[int], sampling: Any, fresh_id: str) -> None:
        if res.in_engine and not new_tokens:
            # Nothing to append means "sample this position again" (the last token was dropped and the request
            # stayed). A session cannot un-compute its last token, so restart it from the context; prefix
            # caching returns all but the last block.
            link.abort([res.engine_id])
            res.engine_id, res.in_engine = fresh_id, False
        tokens = new_tokens if res.in_engine else res.context + new_tokens
        num_tokens = len(res.context) + len(new_tokens)
        params = sampling_params(sampling, self.top_logprobs, res.engine_id, num_tokens=num_tokens)
        link.add(res.engine_id, tokens, params, resumable=True)
        res.in_engine = True

    def release(self, link: CoreLink, res: Resident) -> None:
        if res.in_engine:
            link.abort([res.engine_id])
            res.in_engine = False


class ReadmitHandoff:
    """Re-add the whole sequence every step as a new one-token request; rely on prefix caching."""

    name = "readmit"

    def __init__(self, top_logprobs: int) -> None:
        self.top_logprobs = top_logprobs

    def submit(self, link: CoreLink, res: Resident, new_tokens: list[int], sampling: Any, fresh_id: str) -> None:
        res.engine_id = fresh_id
        tokens = res.context + new_tokens
        params = sampling_params(sampling, self.top_logprobs, fresh_id, seed_offset=len(tokens))
        link.add(fresh_id, tokens, params, resumable=False)
        res.in_engine = True  # until its token arrives (vLLM then frees it)

    def release(self, link: CoreLink, res: Resident) -> None:
        if res.in_engine and link.holds(res.engine_id):
            link.abort([res.engine_id])
        res.in_engine = False


HANDOFF_MODES: dict[str, type[SessionHandoff] | type[ReadmitHandoff]] = {
    SessionHandoff.name: SessionHandoff,
    ReadmitHandoff.name: ReadmitHandoff,
}


assert tuple(sorted(HANDOFF_MODES)) == HANDOFF_MODE_NAMES, "engine.types.HANDOFF_MODE_NAMES is out of date"


def handoff_mode(name: str, top_logprobs: int) -> SessionHandoff | ReadmitHandoff:
    """The hand-off strategy called ``name``; unknown names are a ConfigError listing the valid ones."""
    try:
        return HANDOFF_MODES[name](top_logprobs)
    except KeyError:
        raise ConfigError("handoff", f"unknown mode {name!r}; valid: {', '.join(sorted(HANDOFF_MODES))}") from None
