"""A closed-loop workload against one running server: ``N`` clients, each sending its next streamed request as
soon as the previous one finished; throughput is counted over a measurement window after a warm-up.

Every request asks for exactly ``max_tokens`` tokens (``ignore_eos``), greedy, so all systems do the same work; with
``lengths`` (a simulator preset, ``trserve.bench.requests``) request ``i`` of client ``k`` has its own prompt and
output lengths, the same in every run.
Throughput is the server's own committed-token counter (``/metrics``) read at both ends of the window, so
requests cut by the window edges count exactly for their part inside it; latencies come from the requests that
finished inside the window.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from trserve.bench.requests import Lengths, request_body
from trserve.bench.stream import Connection, StreamError

#: Short chat-like prompts (plain completions: no chat template, so prompt lengths stay small and equal).
PROMPTS = (
    "The capital of France is",
    "Three primary colors are",
    "One sentence about the sea:",
    "Twelve plus thirty equals",
    "A short tip for staying focused:",
    "Bees make honey because",
    "A cat, described in five words:",
    "The sky is blue because",
)


@dataclass(frozen=True)
class Workload:
    """What each client sends: ``max_tokens`` per request (or, with ``lengths``, each request's drawn lengths and
    token-id prompt; with ``routing`` = (P, C) too, its schedule for the ``schedule`` router), after ``warmup_s``
    measured for ``window_s``. ``record_text``: keep a digest of every finished answer's text. ``first_gap_s``:
    client k sends its first request k x that after the start, so the server sees them in the clients' order (0: all
    at once, in whatever order their connections are served)."""

    max_tokens: int = 32
    warmup_s: float = 3.0
    window_s: float = 10.0
    lengths: Lengths | None = None
    routing: tuple[list[list[float]], list[list[float]]] | None = None
    record_text: bool = False
    first_gap_s: float = 0.0


@dataclass
class RequestRecord:
    sent: float
    first: float | None = None
    done: float | None = None
    num_tokens: int = 0
    #: ``client.index``: which request of which client (the same request in every run).
    key: str = ""
    #: The request's ``max_tokens`` (every request asks ``ignore_eos``: an answer in full has exactly this many).
    asked_tokens: int = 0
    texts: list[str] | None = None
    error: str | None = None


@dataclass
class LoadResult:
    """One closed-loop run: throughput over the window and latency summaries (seconds) of requests that
    finished inside it."""

    concurrency: int
    throughput_tok_s: float
    window_s: float
    num_finished: int
    metrics_before: str = ""
    metrics_after: str = ""
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    #: What the ``probe`` given to :func:`run_load` read at the window's start and end (e.g. CPU times).
    probe_before: dict[str, Any] = field(default_factory=dict)
    probe_after: dict[str, Any] = field(default_factory=dict)
    #: Requests the server refused or broke off (warm-up and window), and the first few messages.
    num_failed: int = 0
    failures: list[str] = field(default_factory=list)
    #: With ``Workload.record_text``: ``{client.index: sha1 of the text}`` of every request answered in full.
    answers: dict[str, str] = field(default_factory=dict)
    #: Over the whole run (warm-up and window): requests answered without error, the tokens the server reported
    #: for them (each answer's usage) and the tokens they asked for; an answer short or long of its
    #: ``max_tokens`` makes the two token counts differ.
    num_answered: int = 0
    answered_tokens: int = 0
    asked_tokens: int = 0


def _body(prompt: str, work: Workload) -> dict[str, Any]:
    return {"model": "tokenrouter", "prompt": prompt, "max_tokens": work.max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip


async def _client_loop(url: str, k: int, work: Workload, stop_at: float, out: list[RequestRecord]) -> None:
    """One closed-loop client on its own keep-alive connection (the lean client of :mod:`trserve.bench.stream`)."""
    conn = Connection(url)
    requests = [conn.request("/v1/completions", _body(p, work)) for p in PROMPTS] if work.lengths is None else []
    i = 0
    await asyncio.sleep(k * work.first_gap_s)
    try:
        while time.perf_counter() < stop_at:
            asked = work.max_tokens
            if work.lengths is None:
                request = requests[(k + i) % len(requests)]
            else:
                body = request_body(work.lengths, k, i, work.routing)
                request, asked = conn.request("/v1/completions", body), int(body["max_tokens"])
            rec = RequestRecord(sent=time.perf_counter(), key=f"{k}.{i}", texts=[] if work.record_text else None,
                                asked_tokens=asked)  # fmt: skip
            try:
                await conn.stream(request, rec)
            except StreamError as exc:  # counted, not fatal: a refusal under memory pressure is a result
                rec.error = str(exc)
            rec.done = time.perf_counter()
            rec.first = rec.first or rec.done
            out.append(rec)
            i += 1
    finally:
        conn.close()  # a request cut at the window's end: the server sees the disconnect and aborts it


async def run_load(
    url: str, concurrency: int, work: Workload, probe: Callable[[], dict[str, Any]] | None = None
) -> LoadResult:
    """Drive ``concurrency`` closed-loop clients; in-flight requests at the window's end are cancelled (the
    server aborts them and frees their KV). ``probe`` is read beside ``/metrics`` at both ends of the window."""
    read = probe or dict
    records: list[RequestRecord] = []
    start = time.perf_counter()
    win_end = start + work.warmup_s + work.window_s
    async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:  # /metrics only
        tasks = [asyncio.create_task(_client_loop(url, k, work, win_end, records)) for k in range(concurrency)]
        await asyncio.sleep(work.warmup_s)
        before, probe_before, win_start = await _metrics(client), read(), time.perf_counter()
        await asyncio.sleep(max(0.0, win_end - time.perf_counter()))
        after, probe_after, win_end = await _metrics(client), read(), time.perf_counter()
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
            raise r
    result = summarize(records, concurrency, win_start, win_end)
    failed = [r.error for r in records if r.error is not None]
    result.num_failed, result.failures = len(failed), failed[:5]
    answered = [r for r in records if r.error is None and r.done is not None]
    result.num_answered = len(answered)
    result.answered_tokens = sum(r.num_tokens for r in answered)
    result.asked_tokens = sum(r.asked_tokens for r in answered)
    result.answers = {r.key: hashlib.sha1("".join(r.texts).encode()).hexdigest()
                      for r in records if r.texts is not None and r.error is None}  # fmt: skip
    result.metrics_before, result.metrics_after = before, after
    result.probe_before, result.probe_after = probe_before, probe_after
    result.throughput_tok_s = committed_tokens(after, before) / result.window_s
    return result


async def _metrics(client: httpx.AsyncClient) -> str:
    response = await client.get("/metrics")
    response.raise_for_status()
    return response.text


def metric_values(text: str, name: str) -> dict[str, float]:
    """``{model label: value}`` of one per-model Prometheus series (``""`` for an unlabelled one)."""
    out: dict[str, float] = {}
    for label, value in re.findall(rf'^{name}(?:\{{model="([^"]*)"\}})? ([0-9.e+-]+)$', text, re.M):
        out[label] = float(value)
    return out


def metric_delta(after: str, before: str, name: str) -> dict[str, float]:
    a, b = metric_values(after, name), metric_values(before, name)
    return {k: v - b.get(k, 0.0) for k, v in a.items()}


#: vLLM's own server counts generated tokens in this series (labels ``engine`` and ``model_name``).
VLLM_GENERATED = "vllm:generation_tokens_total"


def labelled_sum(text: str, name: str) -> float:
    """The sum of every sample of one Prometheus series whatever its labels (0 when absent)."""
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+-]+)$", text, re.M))


def committed_tokens(after: str, before: str) -> float:
    """Output tokens the server committed between two ``/metrics`` texts: TokenRouter's per-model counter, or,
    from vLLM's own OpenAI server (which has none), vLLM's generated-token counter."""
    if "tokenrouter_tokens_total" in after:
        return sum(metric_delta(after, before, "tokenrouter_tokens_total").values())
    return labelled_sum(after, VLLM_GENERATED) - labelled_sum(before, VLLM_GENERATED)


def summarize(records: list[RequestRecord], concurrency: int, win_start: float, win_end: float) -> LoadResult:
    """Latencies of the requests that finished inside the window (throughput is filled in by the caller)."""
    result = LoadResult(concurrency, 0.0, win_end - win_start, 0)
    for rec in records:
        if rec.done is None or rec.first is None or rec.error is not None or not win_start <= rec.done <= win_end:
            continue
        result.num_finished += 1
        result.ttft_s.append(rec.first - rec.sent)
        result.e2e_s.append(rec.done - rec.sent)
        if rec.num_tokens > 1:
            result.tpot_s.append((rec.done - rec.first) / (rec.num_tokens - 1))
    return result
