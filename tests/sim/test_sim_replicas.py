"""The simulator with replicas, against an independent expectation: k replicas of every model carrying N requests
are k independent pipelines of N/k requests each (what pinning to one replica of each model and least-loaded
admission give under a symmetric load), so they commit k times what one pipeline with N/k requests commits.
Latencies grow with the batch (the paper's A100 tables), so N requests on one pipeline commit visibly less
than on k: the check can tell replicas from a bigger batch."""

import json
from dataclasses import replace

import pytest

from trcore import ConfigError
from trsim.build import markov_config
from trsim.driver import simulate
from trsim.latency import TableModel

P = [[0.65, 0.35], [1.0, 0.0]]
C = [[1.0, 0.0], [1.0, 0.0]]
LATENCY = [
    TableModel([1, 4, 8, 16], [0.006, 0.0066, 0.0074, 0.009]),
    TableModel([1, 4, 8, 16], [0.0279, 0.0295, 0.0315, 0.036]),
]
TOKENS, WARMUP = 60_000, 5_000


def tok_s(replicas, concurrency, thresholds=(1, 1), tables=None):
    cfg = markov_config(P, C, LATENCY, thresholds=list(thresholds), concurrency=concurrency)
    if tables is not None:
        cfg = replace(cfg, policies=tuple(replace(p, table=t) for p, t in zip(cfg.policies, tables, strict=True)))
    result = simulate(replace(cfg, replicas=replicas), tokens=TOKENS, warmup_tokens=WARMUP)
    return result


@pytest.mark.parametrize(
    ("k", "per_pipeline", "thresholds", "tables"),
    [(2, 8, (1, 1), None), (3, 4, (1, 3), None), (2, 6, (1, 1), [{}, {4: 4, 6: 5}])],
)
def test_k_replicas_of_n_requests_commit_k_times_one_pipeline_of_n_over_k(k, per_pipeline, thresholds, tables):
    one = tok_s((1, 1), per_pipeline, thresholds, tables).throughput_tok_s
    many = tok_s((k, k), k * per_pipeline, thresholds, tables)
    assert many.throughput_tok_s == pytest.approx(k * one, rel=0.02)
    bigger_batch = tok_s((1, 1), k * per_pipeline, thresholds, tables).throughput_tok_s
    assert bigger_batch < 0.96 * k * one  # without replicas the same N commits less: the check discriminates
    steps = many.extra["replica_steps"]
    for model in (0, 1):
        counts = [n for m, _, n in steps if m == model]
        assert len(counts) == k and min(counts) > 0.9 * max(counts)  # every replica steps, evenly


def test_one_replica_each_is_the_run_without_replicas():
    plain = markov_config(P, C, LATENCY, thresholds=[1, 2], concurrency=8)
    a = simulate(plain, tokens=20_000).to_dict()
    b = simulate(replace(plain, replicas=(1, 1)), tokens=20_000).to_dict()
    a.pop("wall_s"), b.pop("wall_s"), a.pop("sim_tokens_per_wall_s"), b.pop("sim_tokens_per_wall_s")
    assert a == b and "replica_steps" not in b["extra"]


def test_more_small_replicas_relieve_only_the_small_model():
    base = tok_s((1, 1), 16)
    wide = tok_s((2, 1), 16)
    assert wide.models[0].mean_batch == pytest.approx(base.models[0].mean_batch / 2, rel=0.1)
    assert wide.models[1].mean_batch == pytest.approx(base.models[1].mean_batch, rel=0.1)


def test_replicas_need_one_count_per_model():
    cfg = markov_config(P, C, LATENCY, thresholds=[1, 1], concurrency=4)
    with pytest.raises(ConfigError, match="replicas"):
        replace(cfg, replicas=(2,))


def test_simulate_cli_takes_replicas_and_refuses_a_bad_count():
    from typer.testing import CliRunner

    from tokenrouter.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["simulate", "--replicas", "2,1", "-N", "8", "--tokens", "5000", "--json"])
    assert ok.exit_code == 0, ok.output
    steps = json.loads(ok.output)["extra"]["replica_steps"]
    assert [(m, r) for m, r, _ in steps] == [(0, 0), (0, 1), (1, 0)] and min(n for _, _, n in steps) > 0
    bad = runner.invoke(app, ["simulate", "--replicas", "2", "--tokens", "1000"])
    assert bad.exit_code == 2 and "--replicas: needs 2 values" in bad.output
