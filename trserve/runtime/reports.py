"""What a subserver tells the front end: per step, the tokens it committed, the requests it finished and where each
live request goes on (the front end's resume points after a crash); per probe, its memory."""

from __future__ import annotations

import contextlib
from typing import Any

from trcore import CLIENT, Batch, PeerReq
from trserve.runtime.messages import Finished, Route, StepReport


def resume_points(batch: Batch, handoffs: list[tuple[int, PeerReq]], done: set[str]) -> list[Route]:
    """Where each live request of ``batch`` goes on after this step: ``(request_id, model, num_output, extra)``.
    The front end keeps the latest, to resume the request on that model if a process dies."""
    moved = {msg.request_id: dest for dest, msg in handoffs if dest != CLIENT and not msg.is_finished}
    return [
        (r.request_id, moved.get(r.request_id, batch.model), r.num_output_tokens, r.extra or None)
        for r in batch.requests
        if r.request_id not in done and not r.is_finished
    ]


def committed_tokens(batch: Batch, before: list[int], done: set[str]) -> list[tuple[str, int, tuple[int, ...]]]:
    """``(request_id, offset, tokens)`` for each request of ``batch`` whose output grew past ``before`` (its
    output length at launch); finished requests (``done``) report their whole output separately."""
    return [
        (r.request_id, n, tuple(r.output_token_ids[n:]))
        for r, n in zip(batch.requests, before, strict=True)
        if r.num_output_tokens > n and r.request_id not in done
    ]


def finished_message(msg: PeerReq, batch: Batch) -> Finished:
    """The front end's message for a request that finished in ``batch`` (``msg`` is the core's CLIENT hand-off)."""
    req = next(r for r in batch.requests if r.request_id == msg.request_id)
    last = req.token_ids[-1] if req.num_output_tokens else None
    reason = "stop" if last is not None and last in req.spec.stop_token_ids else "length"
    return Finished(msg.request_id, tuple(msg.token_ids), reason)


def python_objects() -> int:
    """Live objects the garbage collector tracks, after a collection (a leak of Python objects shows here)."""
    import gc

    gc.collect()
    return len(gc.get_objects())


def rss_bytes() -> int:
    """Resident memory of this process and its children (an engine core may run in a child)."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return int(total)


def touched_requests(msg: Any) -> list[str]:
    """The request ids a subserver message is about (a report's tokens, routes, finishes and failures)."""
    if not isinstance(msg, StepReport):
        return []
    ids = [t[0] for t in msg.tokens] + [r[0] for r in msg.routes]
    ids += [f.request_id for f in msg.finished] + [f.request_id for f in msg.failed]
    return list(dict.fromkeys(ids))
