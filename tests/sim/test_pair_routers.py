"""The local pair's trained routers (models/local-smollm2/routers/): loadable by the serving code, servable from vLLM
signals, and documented by their training record (threshold, precision/recall, the command that made them)."""

import json
import math

import pytest

from tests.factories import make_step
from trcore import PROGRAMS, check_signals
from trsim.pairs import LOCAL_PAIR, load_pair

VLLM_SIGNALS = {"token_ids", "top_logprobs"}


@pytest.mark.parametrize("name", ["r2r", "citer"])
def test_committed_router_matches_its_metrics_and_serves_from_vllm_signals(name):
    pair = load_pair(LOCAL_PAIR)
    report = json.loads((pair.folder / pair.spec.routers[name].record).read_text())
    program = PROGRAMS.create(name, 0, 2, router=str(pair.router_path(name)))
    assert program.threshold == report["threshold"]
    assert report["command"].startswith("tokenrouter train-routers")
    test = report["metrics"]["test"]
    p, r = test["precision"], test["recall"]
    assert test["num_tokens"] > 0 and test["auc"] > 0.5
    assert p > test["positive_rate"]  # better than routing the same share of tokens at random
    # The figures describe one confusion matrix: F1 from P and R, and TP/N both as P x route rate and R x base rate.
    assert abs(test["f1"] - 2 * p * r / (p + r)) < 1e-3
    assert abs(p * test["route_rate"] - r * test["positive_rate"]) < 5e-3
    check_signals(program, VLLM_SIGNALS)  # no hidden state needed
    assert (program.router.token_table is not None) == (name == "r2r")

    top_k = program.router.top_k
    confident = {0: math.log(0.97), **{t: math.log(0.03 / (top_k - 1)) for t in range(1, top_k)}}
    flat = {t: math.log(1.0 / top_k) for t in range(top_k)}
    scores = program.router.scores(make_step([0, 0], top_logprobs=[confident, flat]))
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] != scores[1]  # the router reads its inputs (no direction asserted: on this pair the SLM
    # is often confidently wrong, see the README)
