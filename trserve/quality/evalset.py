"""The held-out question set: loading, answer normalization and contains-match, overlap with training prompts,
and the filter that keeps the questions the large model alone answers right."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trcore.errors import ConfigError
from trserve.paths import PROMPTS_DIR

EVAL_SET = PROMPTS_DIR / "eval_qa.jsonl"
CANDIDATES = PROMPTS_DIR / "eval_qa_candidates.jsonl"
#: Prompt sets that train the routers or tune thresholds and calibration: the evaluation set must avoid them.
TRAINING_SETS = ("routing.jsonl", "small_calibration.jsonl", "small_calibration_answers.jsonl")


@dataclass(frozen=True)
class Question:
    """One question and the strings any of which makes an answer right (after normalization)."""

    id: str
    prompt: str
    answers: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "prompt": self.prompt, "answers": list(self.answers)}


def load_questions(path: Path = EVAL_SET, option: str = "--eval-set") -> list[Question]:
    """Questions from a JSONL file with ``id``, ``prompt`` and ``answers`` on each line; a missing file, an empty
    one or a bad line is a ConfigError naming ``option``, the file and the line."""
    if not path.is_file():
        raise ConfigError(option, f"{path}: no such file")
    lines = path.read_text().splitlines()
    questions = [_question(line, f"{path}:{n}", option) for n, line in enumerate(lines, 1) if line.strip()]
    if not questions:
        raise ConfigError(option, f"{path}: no questions")
    return questions


def _question(line: str, where: str, option: str) -> Question:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(option, f"{where}: invalid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ConfigError(option, f"{where}: expected an object with id, prompt and answers, got {row!r:.40}")
    missing = [key for key in ("id", "prompt", "answers") if key not in row]
    if missing:
        raise ConfigError(option, f"{where}: missing {', '.join(missing)}")
    answers = row["answers"]
    if not isinstance(answers, list) or not answers or not all(_plain(a) for a in answers):
        raise ConfigError(option, f"{where}: answers must be a non-empty list of strings, got {answers!r:.40}")
    if not isinstance(row["prompt"], str) or not row["prompt"].strip() or not _plain(row["id"]):
        raise ConfigError(option, f"{where}: prompt must be a non-empty string and id a string or number")
    return Question(str(row["id"]), row["prompt"], tuple(str(a) for a in answers))


def _plain(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def write_questions(questions: Iterable[Question], path: Path) -> None:
    path.write_text("".join(json.dumps(q.to_json()) + "\n" for q in questions))


def normalize(text: str) -> str:
    """Lower case, accents stripped, every run of non-alphanumerics one space (``"Bogotá."`` -> ``"bogota"``)."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^a-z0-9]+", " ", plain.lower()).split())


def is_correct(answer: str, references: Sequence[str]) -> bool:
    """Contains-match on whole words: some normalized reference occurs in the normalized answer."""
    padded = f" {normalize(answer)} "
    return any(f" {normalize(ref)} " in padded for ref in references if normalize(ref))


def training_prompts(prompts_dir: Path = PROMPTS_DIR) -> set[str]:
    """The normalized prompts of every training/tuning set."""
    out: set[str] = set()
    for name in TRAINING_SETS:
        path = prompts_dir / name
        if path.exists():
            out |= {normalize(json.loads(line)["prompt"]) for line in path.read_text().splitlines() if line.strip()}
    return out


def overlap(questions: Iterable[Question], prompts_dir: Path = PROMPTS_DIR) -> list[str]:
    """Ids of questions whose normalized prompt is also a training prompt."""
    seen = training_prompts(prompts_dir)
    return [q.id for q in questions if normalize(q.prompt) in seen]


@dataclass(frozen=True)
class Filtered:
    """The outcome of filtering candidates through the large model: kept questions and why others went."""

    kept: list[Question]
    num_candidates: int
    num_overlap: int
    num_wrong: int


def filter_candidates(candidates: Sequence[Question], large_answers: Sequence[str]) -> Filtered:
    """Keep the candidates that overlap no training prompt and that the large model (``large_answers``, one per
    candidate) answers right."""
    overlapping = set(overlap(candidates))
    kept: list[Question] = []
    num_wrong = 0
    for q, answer in zip(candidates, large_answers, strict=True):
        if q.id in overlapping:
            continue
        if is_correct(answer, q.answers):
            kept.append(q)
        else:
            num_wrong += 1
    return Filtered(kept, len(candidates), len(overlapping), num_wrong)
