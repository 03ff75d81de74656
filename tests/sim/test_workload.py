"""Workloads: closed and open loop, length distributions and files, multi-turn sessions, presets."""

import random
from dataclasses import replace

import pytest

from trcore import ConfigError
from trsim import PRESETS, markov_config, preset, simulate
from trsim.latency import make_latency_model
from trsim.lengths import LengthDist, LengthPairs, lognormal, read_length_pairs


def test_length_distributions_respect_their_bounds():
    rng = random.Random(0)
    dist = lognormal(1200, 0.6, maximum=2048, minimum=16)
    draws = [dist.sample(rng) for _ in range(2000)]
    assert min(draws) >= 16 and max(draws) == 2048
    assert 1000 < sorted(draws)[1000] < 1400  # median near 1200
    assert {LengthDist("uniform", low=3, high=5).sample(rng) for _ in range(100)} == {3, 4, 5}
    assert LengthDist("empirical", values=(7,)).sample(rng) == 7


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "constant", "value": 0},
        {"kind": "uniform", "low": 5, "high": 2},
        {"kind": "zipf"},
        {"kind": "lognormal", "median": -1.0},
        {"kind": "empirical"},
    ],
)
def test_bad_length_distributions_are_rejected(kwargs):
    with pytest.raises(ConfigError):
        LengthDist(**kwargs)


def test_non_positive_rates_and_counts_are_rejected():
    for field, value in (("concurrency", 0), ("rate_per_s", 0.0), ("turns", 0), ("num_sessions", 0)):
        with pytest.raises(ConfigError, match=f"workload.{field}"):
            preset("short-reasoning", **{field: value})
    valid = "valid: agentic, endless, long-reasoning, short-reasoning, short-reasoning-cpu"
    with pytest.raises(ConfigError, match=valid):
        preset("chat")


def test_presets_match_the_paper_workloads():
    assert PRESETS["short-reasoning"].output_tokens.maximum == 2048
    assert PRESETS["long-reasoning"].output_tokens.maximum == 8192
    agentic = PRESETS["agentic"]
    assert agentic.prompt_tokens.median == 8192 and agentic.output_tokens.maximum == 1024 and agentic.turns > 1


def test_poisson_arrivals_finish_every_session(r2r):
    config = r2r((1, 1), workload=preset("short-reasoning", arrival="poisson", rate_per_s=2.0, num_sessions=10))
    result = simulate(config)
    assert result.num_finished == 10 and result.num_unfinished == 0


def test_multi_turn_sessions_reuse_their_prefix(r2r):
    latency = make_latency_model("quadratic", {"a": 0.005, "b": 0.0, "c": 0.0, "d": 1e-5, "e": 0.0})
    llm = make_latency_model("quadratic", {"a": 0.025, "b": 0.0, "c": 0.0, "d": 4e-5, "e": 0.0})
    base = preset("agentic", concurrency=4, num_sessions=4)
    cached = simulate(r2r(latency=(latency, llm), workload=base))
    uncached = simulate(r2r(latency=(latency, llm), workload=replace(base, prefix_cache=False)))
    assert cached.num_finished == uncached.num_finished == 4 * base.turns
    assert cached.committed_tokens == uncached.committed_tokens  # same lengths, same seed
    assert cached.simulated_s < uncached.simulated_s  # follow-up turns skip re-prefilling their history


def test_lengths_file_is_cycled(tmp_path, r2r):
    path = tmp_path / "lengths.csv"
    path.write_text("num_prompt_tokens,num_output_tokens\n10,5\n20,7\n")
    pairs = read_length_pairs(path)
    assert pairs.pair(0) == (10, 5) and pairs.pair(3) == (20, 7)
    wl = replace(preset("endless"), pairs=pairs, num_sessions=4)
    result = simulate(markov_config([[1.0]], None, [0.01], [1], 2, wl))
    assert result.committed_tokens == 5 + 7 + 5 + 7


def test_bad_lengths_file_names_the_row(tmp_path):
    path = tmp_path / "lengths.jsonl"
    path.write_text('{"num_prompt_tokens": 3, "num_output_tokens": 4}\n{"num_prompt_tokens": 3}\n')
    with pytest.raises(ConfigError, match=r"lengths_file\[1\]"):
        read_length_pairs(path)


def test_a_staggered_closed_loop_shortens_only_the_first_requests():
    # Four sessions, 100-token outputs: the first requests write 25, 50, 75, 100 tokens; their successors 100.
    # Six sessions in all (num_sessions): 25 + 50 + 75 + 100 + 100 + 100 = 450 committed tokens.
    wl = replace(preset("endless"), output_tokens=LengthDist("constant", 100), concurrency=4, num_sessions=6)
    single = markov_config([[1.0]], None, [0.01], [1], 4, replace(wl, staggered_start=True))
    assert simulate(single).committed_tokens == 450
    assert simulate(markov_config([[1.0]], None, [0.01], [1], 4, wl)).committed_tokens == 600  # unstaggered


def test_pairs_by_client_give_each_client_its_own_next_request():
    # Two clients, pairs laid out client by client (k * 2 + i): client 0 writes 10 then 5 tokens, client 1 writes
    # 2 then 1. Client 1 ends first (step 2); three sessions in all. Its own next request writes 1 token:
    # 10 + 2 + 1 = 13 committed. Without pairs_by_client it takes the next unstarted pair (client 0's 5 tokens).
    pairs = LengthPairs(((1, 10), (1, 2), (1, 5), (1, 1)))
    wl = replace(preset("endless"), pairs=pairs, concurrency=2, num_sessions=3)
    by_client = markov_config([[1.0]], None, [0.01], [1], 2, replace(wl, pairs_by_client=True))
    assert simulate(by_client).committed_tokens == 10 + 2 + 1
    assert simulate(markov_config([[1.0]], None, [0.01], [1], 2, wl)).committed_tokens == 10 + 2 + 5


def test_pairs_by_client_needs_pairs_in_a_closed_loop():
    with pytest.raises(ConfigError, match="pairs_by_client"):
        replace(preset("endless"), pairs_by_client=True)
    pairs = LengthPairs(((1, 10),))
    with pytest.raises(ConfigError, match="pairs_by_client"):
        replace(preset("endless"), pairs=pairs, arrival="poisson", pairs_by_client=True)
