"""Shared factories for tests: request specs, client messages, step results, scripted programs."""

from __future__ import annotations

from collections.abc import Sequence

from trcore import (
    BatchingPolicy,
    PeerReq,
    RequestSpec,
    Routing,
    RoutingProgram,
    StepResult,
    Subserver,
    new_request_message,
)


def make_spec(request_id: str = "r0", num_prompt_tokens: int = 3, max_tokens: int = 8, **kw: object) -> RequestSpec:
    return RequestSpec(request_id=request_id, num_prompt_tokens=num_prompt_tokens, max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


def make_arrival(request_id: str = "r0", prompt: Sequence[int] = (1, 2, 3), max_tokens: int = 8, num_models: int = 2,
                 **kw: object) -> PeerReq:
    spec = make_spec(request_id, len(prompt), max_tokens, **kw)
    return new_request_message(spec, prompt, num_models)


def make_step(token_ids: Sequence[int], request_ids: Sequence[str] = (), **signals: object) -> StepResult:
    return StepResult(token_ids=list(token_ids), request_ids=list(request_ids), **signals)  # type: ignore[arg-type]


class ScriptedProgram(RoutingProgram):
    """Routes by a fixed script: ``script[request_id]`` is a list of (destination, kept) per step here."""

    name = "scripted"

    def __init__(self, model: int, num_models: int, script: dict[str, list[tuple[int, bool]]] | None = None,
                 default: int | None = None) -> None:
        super().__init__(model, num_models)
        self.script = script or {}
        self.default = model if default is None else default

    def route(self, step: StepResult) -> Routing:
        dests, keep = [], []
        for rid in step.request_ids:
            moves = self.script.get(rid)
            dest, kept = moves.pop(0) if moves else (self.default, True)
            dests.append(dest)
            keep.append(kept)
        return Routing(dests, keep)


def make_subserver(model: int = 0, num_models: int = 2, threshold: int = 1, program: RoutingProgram | None = None,
                   **policy: object) -> Subserver:
    program = program or ScriptedProgram(model, num_models)
    return Subserver(program, BatchingPolicy(threshold=threshold, **policy), record_trace=True)  # type: ignore[arg-type]
