"""The quality tool's entry points: build the evaluation set by filtering candidates through the large model, and
run a sweep into a results document; operating points are read from and written to a committed JSON file."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trserve.config import ServeConfig
from trserve.quality.checks import check_engines
from trserve.quality.evalset import EVAL_SET, Filtered, Question, filter_candidates
from trserve.quality.generate import answer_server
from trserve.quality.score import LargeScorer
from trserve.quality.sweep import ENDPOINTS, Progress, SweepPoint, run_sweep
from trserve.runtime.runspec import resolve_model_path
from trserve.server.defaults import OPERATING_POINTS, load_operating_points


def build_set(cfg: ServeConfig, candidates: Sequence[Question], max_tokens: int, concurrency: int) -> Filtered:
    """Answer every candidate with the large model alone (greedy) and keep the right, non-overlapping ones."""

    async def go() -> list[str]:
        async with answer_server(cfg) as server:
            large = ENDPOINTS[0]
            answers = await server.answer(large.program, large.params, [q.prompt for q in candidates],
                                          max_tokens, concurrency)  # fmt: skip
        return [a.text for a in answers]

    return filter_candidates(candidates, asyncio.run(go()))


def measure_quality(
    cfg: ServeConfig,
    questions: Sequence[Question],
    points: Sequence[SweepPoint],
    *,
    max_tokens: int,
    concurrency: int,
    command: str,
    progress: Progress,
    eval_set: Path = EVAL_SET,
    probes: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the sweep on one server start; returns the results document (rows carry every answer, ``pair`` the
    model pair measured). Models without checkpoints are refused before anything loads."""
    check_engines(cfg, "models")
    scorer = LargeScorer(resolve_model_path(cfg.models[-1].path))

    async def go() -> list[dict[str, Any]]:
        async with answer_server(cfg) as server:
            return await run_sweep(server, questions, points, scorer, max_tokens=max_tokens,
                                   concurrency=concurrency, progress=progress, probes=probes)  # fmt: skip

    started = time.perf_counter()
    rows = asyncio.run(go())
    return {
        "command": command,
        "pair": cfg.pair,
        "eval_set": eval_set.name,
        "num_questions": len(questions),
        "max_tokens": max_tokens,
        "concurrency": concurrency,
        "models": [m.name for m in cfg.models],
        "dtype": [m.dtype for m in cfg.models],
        "sampling": "greedy (temperature 0), chat template",
        "wall_s": round(time.perf_counter() - started, 1),
        "metrics": {
            "large_share": "output tokens committed by the large model / all output tokens (the answers' provenance)",
            "accuracy": "normalized answer contains a reference (whole words)",
            "relative_accuracy": "accuracy / large-only accuracy",
            "exact_match": "normalized answer equals the large-only answer",
            "token_agreement": "output tokens that are the large model's greedy choice after the same prefix",
            "mean_logprob": "mean log-probability (nats) of the output tokens under the large model",
        },
        "rows": rows,
    }


def save_operating_point(point: dict[str, Any], path: Path = OPERATING_POINTS) -> None:
    """Add or replace the operating point of ``point['program']``."""
    points = load_operating_points(path)
    points[point["program"]] = point
    path.write_text(json.dumps(points, indent=1, sort_keys=True) + "\n")
