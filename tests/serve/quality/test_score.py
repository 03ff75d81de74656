"""Quality scoring: :class:`LargeScorer` (a prompt's KV computed once, then cropped back after every answer)
against a fresh transformers forward pass per answer on the prepared large model, and ``score_point``'s metrics
on hand-built answers with hand-set token scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from trserve.quality.evalset import Question
from trserve.quality.generate import Answer
from trserve.quality.score import LargeScorer, TokenScores
from trserve.quality.sweep import SweepPoint, score_point


@pytest.fixture(scope="module")
def large(prepared_pair: tuple[Path, Path]) -> tuple[LargeScorer, object]:
    from transformers import AutoTokenizer

    path = str(prepared_pair[0])
    return LargeScorer(path), AutoTokenizer.from_pretrained(path)


def _fresh(model: object, prompt: list[int], output: list[int]) -> tuple[float, int]:
    """Summed log-probability of ``output`` after ``prompt`` and its argmax count, from one forward pass over
    prompt + output with no cache."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([prompt + output])).logits[0].float()  # type: ignore[operator]
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)  # position t predicts token t + 1
    target = torch.tensor(output)
    chosen = logprobs.gather(1, target[:, None])[:, 0]
    return float(chosen.sum()), int((logprobs.argmax(dim=-1) == target).sum())


def _greedy(model: object, prompt: list[int], num_tokens: int) -> list[int]:
    import torch

    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(num_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))  # type: ignore[operator]
    return ids[len(prompt) :]


@pytest.mark.serve
def test_scores_equal_a_fresh_forward_pass_for_each_answer_to_one_prompt(large) -> None:
    scorer, tokenizer = large
    prompt = tokenizer.encode("The capital of France is")
    greedy = _greedy(scorer.model, prompt, 6)
    other = tokenizer.encode(" a small village near the sea, far from")
    assert other != greedy[: len(other)]
    # The cached prompt state is reused by every answer after the first: a crop that left the previous answer
    # in the cache would condition the next answer on it.
    for output in (greedy, other, other[:1], greedy[:3] + other[:4]):
        got = scorer.score(prompt, output)
        logprob, argmax = _fresh(scorer.model, prompt, output)
        assert got.num_tokens == len(output)
        assert got.sum_logprob == pytest.approx(logprob, abs=1e-3), output
        assert got.num_argmax == argmax, output
    assert scorer.score(prompt, greedy).num_argmax == len(greedy)  # the model's own greedy tokens
    assert scorer.score(prompt, ()) == TokenScores(0.0, 0, 0)


class HandScorer:
    """Token scores set by hand per answer; records what it was asked."""

    def __init__(self, scores: dict[tuple[int, ...], TokenScores]) -> None:
        self.scores = scores
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def score(self, prompt_ids, output_ids) -> TokenScores:  # type: ignore[no-untyped-def]
        self.calls.append((tuple(prompt_ids), tuple(output_ids)))
        return self.scores[tuple(output_ids)]


def test_score_point_metrics_on_hand_built_answers() -> None:
    questions = [Question("q1", "Capital of France?", ("Paris",)), Question("q2", "Capital of Spain?", ("Madrid",)),
                 Question("q3", "Capital of Germany?", ("Berlin",))]  # fmt: skip
    # Model 0 small, model 1 large: 2 + 0 + 4 = 6 small tokens, 1 + 2 + 1 = 4 large ones.
    answers = [Answer((11, 12, 13), (0, 0, 1), "Paris."), Answer((21, 22), (1, 1), "Rome"),
               Answer((31, 32, 33, 34, 35), (0, 0, 0, 0, 1), "It is Berlin")]  # fmt: skip
    reference = [Answer((1,), (1,), "paris"), Answer((2,), (1,), "Madrid"), Answer((3,), (1,), "Berlin")]
    scorer = HandScorer({(11, 12, 13): TokenScores(-1.5, 3, 2), (21, 22): TokenScores(-4.0, 2, 0),
                         (31, 32, 33, 34, 35): TokenScores(-2.5, 5, 5)})  # fmt: skip
    prompts = [[7, 1], [7, 2], [7, 3]]
    row = score_point(SweepPoint("r", "rstitch", {"tau": 1.0}), questions, answers, reference, prompts, scorer, 2)
    assert scorer.calls == [((7, 1), (11, 12, 13)), ((7, 2), (21, 22)), ((7, 3), (31, 32, 33, 34, 35))]
    assert row["num_tokens_by_model"] == [6, 4] and row["large_share"] == pytest.approx(0.4)
    assert row["accuracy"] == pytest.approx(2 / 3)  # "Paris." and "It is Berlin" contain their answer
    assert row["exact_match"] == pytest.approx(1 / 3)  # only "Paris." equals its reference ("paris") normalized
    assert row["token_agreement"] == pytest.approx((2 + 0 + 5) / 10)
    assert row["mean_logprob"] == pytest.approx((-1.5 - 4.0 - 2.5) / 10)
    assert row["mean_output_tokens"] == pytest.approx(10 / 3)
