"""``ThroughputModel.optimize(candidates=...)`` refuses vectors it cannot read, naming the field: a vector of the
wrong length raised zip()'s ValueError, and a fractional threshold was truncated (1.5 solved as 1, unsaid), where
``solve`` refuses both."""

import pytest

from trcore import ConfigError
from trcore.throughput import ThroughputModel

MODEL = ThroughputModel([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279])


@pytest.mark.parametrize("vector", [(1, 1, 1), (2,), (1.5, 1), (True, 1), ("2", 1)])
def test_a_candidate_that_is_not_one_integer_per_model_is_refused(vector):
    with pytest.raises(ConfigError, match=r"candidates: each needs 2 integer thresholds \(one per model\)"):
        MODEL.optimize(4, candidates=[(1, 2), vector])


def test_integer_candidates_are_solved_as_given():
    result = MODEL.optimize(4, candidates=[(1, 2), (2, 1)])
    assert [c.thresholds for c in result.candidates] == [(1, 1), (1, 2), (2, 1)]
    assert result.candidates[1] == MODEL.solve(4, (1, 2))


def test_workers_with_the_sampled_method_are_refused_not_left_idle():
    with pytest.raises(ConfigError, match="workers: solve exact candidates in parallel; method 'sampled'"):
        MODEL.optimize(4, workers=2, method="sampled")
