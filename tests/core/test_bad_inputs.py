"""The core's public APIs on input a notebook user may bring: a cache exactly filled, errors that cross process
and SimPy boundaries, and values that used to pass unchecked and fail later (or silently do something else)."""

import math
import pickle

import pytest

from trcore.adaptive import AdaptiveConfig, AdaptiveController
from trcore.errors import ConfigError, MemoryInfeasibleError
from trcore.memory import KVBudget
from trcore.move_rates import MoveRates
from trcore.spill import StepCost, spill_policy
from trcore.throughput import KVDemand, memory_check


@pytest.mark.parametrize(("footprint", "n"), [(100, 3), (7, 13), (33, 199), (1, 1), (0.1, 10)])
def test_requests_that_exactly_fill_the_cache_fit(footprint, n):
    capacity = round(footprint * n, 9)
    demand = KVDemand((capacity,), mean_prompt_tokens=footprint)
    assert memory_check([[1.0]], demand, n).max_concurrency == n
    assert memory_check([[1.0]], KVDemand((capacity - 0.5,), mean_prompt_tokens=footprint), n).max_concurrency < n


def test_config_errors_survive_pickling_and_rebuilding_from_their_args():
    for error in (ConfigError("kv", "bad"), MemoryInfeasibleError("kv", "too many")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and (again.field, again.problem, str(again)) == (
            error.field,
            error.problem,
            str(error),
        )
        assert str(type(error)(*error.args)) == str(error)  # SimPy re-raises a process's exception this way


@pytest.mark.parametrize(
    ("make", "field"),
    [(lambda: KVBudget.from_tokens(10), "kv.capacity_tokens"), (lambda: KVBudget.from_tokens(math.nan), "kv.capacity"),
     (lambda: KVBudget.from_tokens(100, 0), "kv.block_size"), (lambda: KVBudget(2.5), "kv.num_blocks"),
     (lambda: KVBudget(math.nan), "kv.num_blocks"), (lambda: KVDemand((math.nan,), 10), "kv.capacity_tokens"),
     (lambda: KVDemand((100,), math.inf), "kv.mean_lengths"),
     (lambda: memory_check([[1.0]], KVDemand((100,), 10), -3), "num_requests"),
     (lambda: memory_check([[1.0]], KVDemand((100,), 10), 1, entry=5), "entry"),
     (lambda: AdaptiveController(AdaptiveConfig(), [0, -1]), "thresholds"),
     (lambda: AdaptiveController(AdaptiveConfig(), [1.7, 2]), "thresholds"),
     (lambda: AdaptiveController(AdaptiveConfig(), [1, 1], max_batch=[8]), "max_batch"),
     (lambda: AdaptiveConfig(seed=math.nan), "adaptive.seed"), (lambda: AdaptiveConfig(min_steps=1.5), "adaptive.min"),
     (lambda: MoveRates([[90, 10], [50, 50]]), "memory.routing"), (lambda: StepCost(-1.0), "memory.step_cost"),
     (lambda: spill_policy("LRU", field="spill"), "spill")],
)  # fmt: skip
def test_bad_values_are_config_errors_naming_the_field_at_once(make, field):
    with pytest.raises(ConfigError) as error:
        make()
    assert error.value.field.startswith(field), error.value


def test_a_cache_of_whole_blocks_still_rounds_down():
    assert KVBudget.from_tokens(40, 16).num_blocks == 2 and KVBudget.from_tokens(16, 16).capacity_tokens == 16


def test_threshold_tables_that_can_deadlock_or_exceed_a_batch_cap_are_refused():
    from trcore.errors import InfeasibleError
    from trcore.policy import check_tables

    with pytest.raises(InfeasibleError, match=r"at 1 active requests the thresholds \[4, 4\] can deadlock"):
        check_tables([1, 1], [{1: 4}, {1: 4}])
    with pytest.raises(InfeasibleError, match=r"at 8 active requests the thresholds \[5, 5\]"):
        check_tables([1, 1], [{8: 5}, {8: 5}])
    with pytest.raises(ConfigError, match=r"tables\[0\]: entry 8: 70 is above the model's batch cap 8"):
        check_tables([1, 1], [{8: 70}, {}], caps=[8, 8])
    check_tables([1, 1], [{8: 4, 16: 1}, {8: 1, 16: 8}])  # an optimizer's table: feasible at every count it keys
