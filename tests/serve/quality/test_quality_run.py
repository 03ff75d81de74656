"""`tokenrouter quality` on a few questions against the real routed server (vLLM engines of the local pair, float32
greedy): the end points are where they must be, every metric is there, the files are written. No accuracy
threshold: three questions are noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trserve.config import ServeConfig
from trserve.quality.evalset import EVAL_SET, is_correct, load_questions, normalize
from trserve.quality.report import write_outputs
from trserve.quality.run import measure_quality
from trserve.quality.sweep import LARGE_ONLY, SMALL_ONLY, SweepPoint
from trserve.server.defaults import DEFAULT_CONFIG

PROBE = "What is the capital of France?"
METRICS = ("large_share", "accuracy", "relative_accuracy", "exact_match", "token_agreement", "mean_logprob")


def _config(large: Path, small: Path) -> ServeConfig:
    data = dict(DEFAULT_CONFIG)
    data["models"] = [{**DEFAULT_CONFIG["models"][0], "path": str(small), "kv_cache_gib": 0.5},
                      {**DEFAULT_CONFIG["models"][1], "path": str(large), "kv_cache_gib": 0.5}]  # fmt: skip
    return ServeConfig.model_validate(data)


@pytest.mark.serve
def test_quality_sweep_on_three_questions(prepared_pair: tuple[Path, Path], tmp_path: Path) -> None:
    lines: list[str] = []
    point = SweepPoint("rstitch", "rstitch", {"tau": 4.5, "tau_back": 3.5})
    doc = measure_quality(_config(*prepared_pair), load_questions(EVAL_SET)[:3], [point], max_tokens=24,
                          concurrency=4, command="test", progress=lines.append, probes=(PROBE,))  # fmt: skip
    large, small, routed = doc["rows"]
    assert [r["name"] for r in doc["rows"]] == [LARGE_ONLY, SMALL_ONLY, "rstitch"] and len(lines) == 3
    assert all(isinstance(r[m], float) for r in doc["rows"] for m in METRICS)
    assert large["large_share"] == 1.0 and small["large_share"] == 0.0 and 0.0 <= routed["large_share"] <= 1.0
    # Every row against the large-only answers and accuracy shown (large-only is the reference, so the other rows
    # carry the check): exact match is normalized equality with large-only's answer to the same question,
    # relative accuracy the row's accuracy over large-only's, and accuracy the share of correct answers.
    questions = load_questions(EVAL_SET)[:3]
    for row in doc["rows"]:
        correct = [is_correct(a, q.answers) for a, q in zip(row["answers"], questions, strict=True)]
        assert row["accuracy"] == pytest.approx(sum(correct) / 3), row["name"]
        same = [normalize(a) == normalize(r) for a, r in zip(row["answers"], large["answers"], strict=True)]
        assert row["exact_match"] == pytest.approx(sum(same) / 3), row["name"]
        expect = row["accuracy"] / large["accuracy"] if large["accuracy"] else 0.0
        assert row["relative_accuracy"] == pytest.approx(expect), row["name"]
    # The small model alone is another model: its tokens cannot all be the large model's argmax.
    assert small["token_agreement"] < large["token_agreement"]
    # The large model's own greedy tokens are (up to vLLM/transformers rounding) its argmax and far likelier
    # under it than the layer-cut model's.
    assert large["token_agreement"] >= 0.9
    assert large["mean_logprob"] > small["mean_logprob"]
    assert all(len(r["answers"]) == 3 and set(r["probe_answers"]) == {PROBE} for r in doc["rows"])
    written = write_outputs(doc, tmp_path)
    assert [p.name for p in written] == ["quality.json", "quality.md", "quality.png"]
    assert json.loads(written[0].read_text())["rows"][0]["name"] == LARGE_ONLY
