"""The simulator's configs on a notebook user's input: a fractional threshold was truncated unsaid (1.5 ran as
1), a fractional concurrency raised range()'s TypeError at the run, and one latency too few blamed P."""

import pytest

from trcore import ConfigError
from trsim import markov_config, simulate

P, C, LATENCY = [[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279]


@pytest.mark.parametrize("thresholds", [[1.5, 1], [2, 1.0], [True, 1]])
def test_a_threshold_that_is_not_a_whole_number_is_refused(thresholds):
    with pytest.raises(ConfigError, match=r"^thresholds: must be whole numbers"):
        markov_config(P, C, LATENCY, thresholds)
    with pytest.raises(ConfigError, match=r"^thresholds: must be whole numbers"):
        markov_config(P, C, LATENCY).with_thresholds(thresholds)


def test_a_fractional_concurrency_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^workload.concurrency: must be a whole number, got 2.5"):
        simulate(markov_config(P, C, LATENCY, concurrency=2.5), tokens=100)


def test_a_latency_list_shorter_than_p_names_the_latencies():
    with pytest.raises(ConfigError, match=r"^latency: needs one entry per model \(2, the rows of P\), got 1"):
        markov_config(P, C, [0.006])


def test_whole_numbers_still_run():
    config = markov_config(P, C, LATENCY, [2, 1], concurrency=4).with_thresholds((1, 3))
    assert config.thresholds == (1, 3)
    assert simulate(config, tokens=500).committed_tokens >= 500
