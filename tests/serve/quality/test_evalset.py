"""The held-out evaluation set: its size, its separation from the training prompts, and answer matching."""

from __future__ import annotations

import json

import pytest

from trserve.quality.evalset import (
    CANDIDATES,
    EVAL_SET,
    Question,
    filter_candidates,
    is_correct,
    load_questions,
    normalize,
    overlap,
)


def test_eval_set_has_at_least_100_questions_with_answers() -> None:
    questions = load_questions(EVAL_SET)
    assert len(questions) >= 100
    assert len({q.id for q in questions}) == len(questions)
    assert all(q.answers and q.prompt for q in questions)


def test_eval_set_is_a_subset_of_the_candidates() -> None:
    candidates = {q.id: q for q in load_questions(CANDIDATES)}
    assert all(candidates[q.id] == q for q in load_questions(EVAL_SET))


def test_no_overlap_with_training_prompts() -> None:
    assert overlap(load_questions(EVAL_SET)) == []


def test_overlap_detects_a_training_prompt(tmp_path) -> None:
    (tmp_path / "routing.jsonl").write_text(json.dumps({"id": "p0", "prompt": "What is the capital of France?"}) + "\n")
    questions = [
        Question("a", "what is the capital of  France", ("paris",)),
        Question("b", "What is 2 plus 2?", ("4",)),
    ]
    assert overlap(questions, tmp_path) == ["a"]


@pytest.mark.parametrize(
    ("answer", "refs", "expected"),
    [
        ("The capital of Colombia is Bogotá.", ("bogota",), True),
        ("12 plus 30 is 42.", ("42", "forty-two"), True),
        ("The answer is 420.", ("42",), False),  # whole words only
        ("Forty-two!", ("42", "forty-two"), True),
        ("I do not know.", ("paris",), False),
    ],
)
def test_contains_match_on_normalized_words(answer: str, refs: tuple[str, ...], expected: bool) -> None:
    assert is_correct(answer, refs) is expected


def test_normalize() -> None:
    assert normalize("  New-York, USA! ") == "new york usa"


def test_filter_keeps_right_answers_and_drops_training_prompts() -> None:
    cands = [
        Question("a", "What is the capital of France?", ("paris",)),  # a training prompt
        Question("b", "What is 2 plus 2?", ("4", "four")),
        Question("c", "What is 3 plus 3?", ("6", "six")),
    ]
    result = filter_candidates(cands, ["Paris.", "2 plus 2 is 4.", "It is 7."])
    assert [q.id for q in result.kept] == ["b"]
    assert (result.num_candidates, result.num_overlap, result.num_wrong) == (3, 1, 1)
