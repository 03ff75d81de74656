"""Per-request routing traces: built from recorded RouteEvents, turned into trace-replay decisions.

Pure helpers (no file I/O): drivers record ``Subserver(record_trace=True).trace`` on every model, pass the
events here, and read or write the plain-dict form (``trace_to_dict`` / ``trace_from_dict``) themselves.
The dict form is one JSONL object per request::

    {"request_id": "r0", "steps": [[model, destination, kept], ...],
     "num_prompt_tokens": 100, "num_output_tokens": 42}

where ``kept`` is 0/1 (whether that step's sampled token was committed); the two length fields are optional.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from trcore.errors import ConfigError
from trcore.request import RequestSpec
from trcore.subserver import RouteEvent

#: What ``TraceReplayRouter`` takes for one trace: model -> that model's (destination, kept) decisions.
Decisions = dict[int, list[tuple[int, bool]]]


class TraceStep(NamedTuple):
    """One step of one request: the model that ran it, where the request went next, whether its token stayed."""

    model: int
    destination: int
    kept: bool


@dataclass(frozen=True)
class RequestTrace:
    """The routing history of one request, in step order."""

    request_id: str
    steps: tuple[TraceStep, ...]
    num_prompt_tokens: int | None = None
    num_output_tokens: int | None = None

    @property
    def num_kept(self) -> int:
        """Committed tokens: steps whose sampled token was kept."""
        return sum(1 for s in self.steps if s.kept)

    @property
    def output_length(self) -> int:
        """Output tokens of the request: the recorded length, else the number of kept steps."""
        return self.num_kept if self.num_output_tokens is None else self.num_output_tokens


def traces_from_events(
    events: Iterable[RouteEvent], specs: Mapping[str, RequestSpec] | None = None
) -> list[RequestTrace]:
    """Group events (from any number of models, in any order) into one trace per request.

    Requests appear in order of their first event; a request's steps are ordered by time (stable, so events
    recorded in order at equal times keep that order). ``specs`` supplies prompt lengths when known.
    """
    grouped: dict[str, list[RouteEvent]] = {}
    for event in events:
        grouped.setdefault(event.request_id, []).append(event)
    first_time = {rid: min(e.time for e in evs) for rid, evs in grouped.items()}
    traces = []
    for rid in sorted(grouped, key=lambda r: first_time[r]):
        ordered = sorted(grouped[rid], key=lambda e: e.time)
        steps = tuple(TraceStep(e.model, e.destination, e.kept) for e in ordered)
        spec = specs.get(rid) if specs is not None else None
        traces.append(
            RequestTrace(rid, steps, spec.num_prompt_tokens if spec else None, sum(1 for s in steps if s.kept))
        )
    return traces


def replay_decisions(traces: Sequence[RequestTrace]) -> list[Decisions]:
    """Per trace, per model, the ordered (destination, kept) decisions: the input of ``TraceReplayRouter``."""
    out: list[Decisions] = []
    for trace in traces:
        per_model: Decisions = {}
        for step in trace.steps:
            per_model.setdefault(step.model, []).append((step.destination, step.kept))
        out.append(per_model)
    return out


def check_trace(trace: RequestTrace, num_models: int | None = None, *, where: str = "trace") -> None:
    """Reject traces a replay cannot follow: model indices out of range, or a step on a model other than
    the one the previous step sent the request to."""
    if not trace.steps:
        raise ConfigError(f"{where}.steps", "must hold at least one step")
    for k, step in enumerate(trace.steps):
        for name, index in (("model", step.model), ("destination", step.destination)):
            if index < 0 or (num_models is not None and index >= num_models):
                limit = f"0..{num_models - 1}" if num_models is not None else ">= 0"
                raise ConfigError(f"{where}.steps[{k}]", f"{name} {index} must be within {limit}")
        if k and step.model != trace.steps[k - 1].destination:
            raise ConfigError(
                f"{where}.steps[{k}]",
                f"runs on model {step.model} but the previous step sent the request to "
                f"{trace.steps[k - 1].destination}",
            )


def trace_to_dict(trace: RequestTrace) -> dict[str, Any]:
    """The JSON-ready form of a trace (one JSONL line)."""
    out: dict[str, Any] = {
        "request_id": trace.request_id,
        "steps": [[s.model, s.destination, int(s.kept)] for s in trace.steps],
    }
    if trace.num_prompt_tokens is not None:
        out["num_prompt_tokens"] = trace.num_prompt_tokens
    if trace.num_output_tokens is not None:
        out["num_output_tokens"] = trace.num_output_tokens
    return out


def trace_from_dict(obj: Any, num_models: int | None = None, *, where: str = "trace") -> RequestTrace:
    """Parse and check one trace object; errors name the offending field (``where`` prefixes it)."""
    if not isinstance(obj, Mapping):
        raise ConfigError(where, f"must be an object, got {type(obj).__name__}")
    rid = obj.get("request_id")
    if not isinstance(rid, str) or not rid:
        raise ConfigError(f"{where}.request_id", "must be a non-empty string")
    raw_steps = obj.get("steps")
    if not isinstance(raw_steps, list):
        raise ConfigError(f"{where}.steps", "must be a list of [model, destination, kept]")
    steps = tuple(_parse_step(s, f"{where}.steps[{k}]") for k, s in enumerate(raw_steps))
    lengths = [_optional_count(obj, key, where) for key in ("num_prompt_tokens", "num_output_tokens")]
    trace = RequestTrace(rid, steps, lengths[0], lengths[1])
    check_trace(trace, num_models, where=where)
    return trace


def _parse_step(raw: Any, where: str) -> TraceStep:
    if not isinstance(raw, list | tuple) or len(raw) != 3:
        raise ConfigError(where, f"must be [model, destination, kept], got {raw!r}")
    model, dest, kept = raw
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (model, dest)):
        raise ConfigError(where, f"model and destination must be integers, got {raw!r}")
    if kept not in (0, 1) or isinstance(kept, float):
        raise ConfigError(where, f"kept must be 0 or 1, got {kept!r}")
    return TraceStep(model, dest, bool(kept))


def _optional_count(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
    return value
