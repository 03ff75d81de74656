"""``tokenrouter demo``: start the server, send a short routed workload through the OpenAI API, report, stop."""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from trserve.config import ServeConfig, dump_config
from trserve.pairs.fill import own_params
from trserve.server.process import ServerProcess
from trserve.server.serve import api_key_of
from trsim.pairs import load_pair

Report = Callable[[str], None]

PROMPTS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "What is 12 plus 30?",
    "Give a short tip for staying focused.",
    "What do bees make?",
    "Describe a cat in five words.",
    "Why is the sky blue? Answer briefly.",
)


async def _one(client: httpx.AsyncClient, cfg: ServeConfig, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": cfg.server.served_model_name, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0.0, "return_provenance": True}  # fmt: skip
    response = await client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


async def run_workload(
    url: str, cfg: ServeConfig, num_requests: int, concurrency: int, max_tokens: int
) -> tuple[list[dict[str, Any]], float]:
    """Send ``num_requests`` chat requests, ``concurrency`` at a time; returns the answers and the wall time."""
    limit = asyncio.Semaphore(concurrency)

    async def bounded(client: httpx.AsyncClient, i: int) -> dict[str, Any]:
        async with limit:
            return await _one(client, cfg, PROMPTS[i % len(PROMPTS)], max_tokens)

    key = api_key_of(cfg)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600.0, headers=headers) as client:
        answers = await asyncio.gather(*(bounded(client, i) for i in range(num_requests)))
    return list(answers), time.perf_counter() - started


def _metric_sums(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for model, value in re.findall(rf'^{name}\{{model="([^"]+)"\}} ([0-9.e+-]+)$', text, re.M):
        out[model] = float(value)
    return out


def run_demo(cfg: ServeConfig, report: Report, *, num_requests: int, concurrency: int, max_tokens: int) -> int:
    """Run the demo, telling ``report`` each line of its account (lines starting ``error:`` are failures);
    returns the exit status (0 on success)."""
    with tempfile.TemporaryDirectory(prefix="tokenrouter-demo-") as tmp:
        config_path = Path(tmp) / "serve.yaml"  # the resolved config (file, --pair), so the child serves exactly it
        config_path.write_text(dump_config(cfg))
        server = ServerProcess(config_path, port=cfg.server.port)
        return _run(cfg, server, report, num_requests, concurrency, max_tokens)


def _run(
    cfg: ServeConfig, server: ServerProcess, report: Report, num_requests: int, concurrency: int, max_tokens: int
) -> int:
    report(f"demo: starting the server ({cfg.mode}, router {cfg.router.program}) ...")
    started = time.perf_counter()
    try:
        server.start(timeout_s=cfg.server.startup_timeout_s)
    except RuntimeError as exc:
        report(f"error: {exc}")
        return 1
    try:
        report(f"demo: server ready in {time.perf_counter() - started:.1f} s at {server.url}")
        answers, wall = asyncio.run(run_workload(server.url, cfg, num_requests, concurrency, max_tokens))
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    except httpx.HTTPStatusError as exc:  # the server refused a request: its one-line reason
        report(f"error: the server answered {exc.response.status_code}: {_reason(exc.response)}")
        return 1
    finally:
        server.stop()
    tokens = sum(int(a["usage"]["completion_tokens"]) for a in answers)
    report(
        f"demo: {len(answers)} requests, {tokens} output tokens in {wall:.2f} s = {tokens / wall:.1f} tok/s "
        f"(concurrency {concurrency})"
    )
    report(operating_point_line(cfg))
    for line in provenance_lines(cfg, answers, _metric_sums(metrics, "tokenrouter_handoffs_total")):
        report(line)
    return 0


def _reason(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def provenance_lines(cfg: ServeConfig, answers: list[dict[str, Any]], handoffs: dict[str, float]) -> list[str]:
    """Who wrote the answers, as the answers say (``usage.tokens_per_model``, the sample's ``provenance``), with
    each model's hand-offs from ``/metrics``."""
    per_model: Counter[str] = Counter()
    for answer in answers:
        per_model.update(answer["usage"]["tokens_per_model"])
    large, total = cfg.models[-1].name, sum(per_model.values())
    lines = [f"demo:   {model}: {count} tokens committed, {handoffs.get(model, 0):.0f} hand-offs"
             for model, count in per_model.items()]  # fmt: skip
    if total:
        lines.append(f"demo: the large model ({large}) wrote {per_model[large] / total:.1%} of the output tokens")
    choice = answers[0]["choices"][0]
    provenance = choice["provenance"]
    lines.append(
        f"demo: sample answer to {PROMPTS[0]!r}: {choice['message']['content']!r} "
        f"({provenance.count(large)} of its {len(provenance)} tokens by {large})"
    )
    return lines


def operating_point_line(cfg: ServeConfig) -> str:
    """Where the config's router stands on answer quality: its committed operating point (``tokenrouter quality``)
    when the config routes with exactly its parameters."""
    router = cfg.router
    point = load_pair(cfg.pair).operating_points().get(router.program) if cfg.pair else None
    if point is None or dict(point["params"]) != own_params(router.params, cfg.pair):
        return f"demo: router {router.program} {dict(router.params)}: no measured operating point (tokenrouter quality)"
    return (
        f"demo: operating point {router.program} {point['params']}: {point['large_share']:.1%} of tokens on the "
        f"large model, accuracy {point['accuracy']:.1%} ({point['relative_accuracy']:.0%} of large-only's) on the "
        "held-out questions"
    )
