"""A quality sweep: every routing program over a grid of its parameters, with large-only and small-only end
points, each scored against the references, the large model's own greedy answers and the large model's
log-probabilities."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trcore.errors import ConfigError
from trserve.quality.evalset import Question, is_correct, normalize
from trserve.quality.generate import Answer, AnswerServer
from trserve.quality.score import LargeScorer

Progress = Callable[[str], None]
LARGE_ONLY = "large-only"
SMALL_ONLY = "small-only"


@dataclass(frozen=True)
class SweepPoint:
    """One routing program with one parameter set; ``name`` is the curve it belongs to."""

    name: str
    program: str
    params: Mapping[str, Any] = field(default_factory=dict)


#: End points on the same routed server: rstitch with tau = 0 hands every small-model token to the large model,
#: which never hands back (tau_back = 0); with an unreachable tau the small model writes everything.
ENDPOINTS = (
    SweepPoint(LARGE_ONLY, "rstitch", {"tau": 0.0, "tau_back": 0.0}),
    SweepPoint(SMALL_ONLY, "rstitch", {"tau": 1e9, "tau_back": 1e9}),
)

#: The committed sweep (sized to run in about 15 minutes on the 2-core CPU machine). Lower thresholds send more
#: tokens to the large model; the learned routers' stored thresholds (about 0.9) route about 20% of the tokens.
DEFAULT_GRID: dict[str, tuple[tuple[str, float], ...]] = {
    "rstitch": (("tau", 0.5), ("tau", 1.5), ("tau", 3.0), ("tau", 4.5), ("tau", 6.0)),
    "r2r": (("threshold", 0.4), ("threshold", 0.7), ("threshold", 0.85), ("threshold", 0.93)),
    "citer": (("threshold", 0.4), ("threshold", 0.7), ("threshold", 0.85), ("threshold", 0.93)),
    "colllm": (("eta", 0.5), ("eta", 0.7), ("eta", 0.85)),
}


def grid_points(
    programs: Sequence[str], grid: Mapping[str, Sequence[tuple[str, float]]] = DEFAULT_GRID
) -> list[SweepPoint]:
    """The sweep points of ``programs`` (rstitch's ``tau_back`` is one nat below ``tau``, as in the default)."""
    points = []
    for program in programs:
        for key, value in grid[program]:
            params: dict[str, Any] = {key: value}
            if program == "rstitch":
                params["tau_back"] = max(0.0, value - 1.0)
            points.append(SweepPoint(program, program, params))
    return points


def parse_points(text: str) -> list[SweepPoint]:
    """Extra points written ``program:key=value,key=value;program:...`` (e.g. ``rstitch:tau=1,tau_back=0``)."""
    points = []
    for item in (t.strip() for t in text.split(";")):
        if not item:
            continue
        program, _, body = item.partition(":")
        if program not in DEFAULT_GRID:
            raise ConfigError("--points", f"unknown program {program!r} in {item!r}; valid: {', '.join(DEFAULT_GRID)}")
        try:
            params = {k.strip(): float(v) for k, v in (kv.split("=") for kv in body.split(",") if kv.strip())}
        except ValueError:
            raise ConfigError("--points", f"expected key=number pairs after '{program}:', got {item!r}") from None
        points.append(SweepPoint(program, program, params))
    return points


def score_point(
    point: SweepPoint,
    questions: Sequence[Question],
    answers: Sequence[Answer],
    reference: Sequence[Answer],
    prompt_ids: Sequence[Sequence[int]],
    scorer: LargeScorer,
    num_models: int,
) -> dict[str, Any]:
    """The metrics of one sweep point (``reference``: the large-only answers)."""
    counts = [sum(a.num_by_model(num_models)[m] for a in answers) for m in range(num_models)]
    total = sum(counts)
    scores = [scorer.score(p, a.token_ids) for p, a in zip(prompt_ids, answers, strict=True)]
    num_scored = sum(s.num_tokens for s in scores)
    return {
        "name": point.name,
        "program": point.program,
        "params": dict(point.params),
        "num_questions": len(questions),
        "num_tokens_by_model": counts,
        "large_share": counts[-1] / total if total else 0.0,
        "accuracy": _mean(is_correct(a.text, q.answers) for q, a in zip(questions, answers, strict=True)),
        "exact_match": _mean(normalize(a.text) == normalize(r.text) for a, r in zip(answers, reference, strict=True)),
        "token_agreement": sum(s.num_argmax for s in scores) / num_scored if num_scored else 0.0,
        "mean_logprob": sum(s.sum_logprob for s in scores) / num_scored if num_scored else 0.0,
        "mean_output_tokens": total / len(answers) if answers else 0.0,
    }


def _mean(flags: Any) -> float:
    values = [float(f) for f in flags]
    return sum(values) / len(values) if values else 0.0


async def run_sweep(
    server: AnswerServer,
    questions: Sequence[Question],
    points: Sequence[SweepPoint],
    scorer: LargeScorer,
    *,
    max_tokens: int,
    concurrency: int,
    progress: Progress,
    probes: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Answer the questions at the end points and every point; returns one metrics row per point, the end points
    first, each with ``relative_accuracy`` (accuracy over large-only's). ``probes`` are extra prompts answered at
    every point and recorded (``probe_answers``), not scored (the demo's question, a training prompt)."""
    prompts = [q.prompt for q in questions]
    prompt_ids = [server.encode(p) for p in prompts]
    rows: list[dict[str, Any]] = []
    reference: list[Answer] = []
    everything = list(ENDPOINTS) + list(points)
    for k, point in enumerate(everything):
        started = time.perf_counter()
        answers = await server.answer(point.program, point.params, [*prompts, *probes], max_tokens, concurrency)
        answers, extra = answers[: len(prompts)], answers[len(prompts) :]
        wall = time.perf_counter() - started
        reference = reference or answers
        row = score_point(point, questions, answers, reference, prompt_ids, scorer, server.cfg.num_models)
        row["wall_s"] = round(wall, 2)
        row["answers"] = [a.text for a in answers]
        row["probe_answers"] = {p: a.text for p, a in zip(probes, extra, strict=True)}
        rows.append(row)
        progress(
            f"[{k + 1}/{len(everything)}] {point.name} {dict(point.params)}: share {row['large_share']:.1%}, "
            f"accuracy {row['accuracy']:.1%}, exact {row['exact_match']:.1%} ({wall:.1f} s)"
        )
    base = rows[0]["accuracy"]
    for row in rows:
        row["relative_accuracy"] = row["accuracy"] / base if base else 0.0
    return rows
