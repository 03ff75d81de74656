"""The replica table (process <-> model, replica) and the least-loaded pinning rule both drivers share."""

import pytest

from trcore import ConfigError
from trcore.replicas import PIN_KEY, ReplicaTable, least_loaded


def test_processes_are_numbered_model_by_model():
    table = ReplicaTable((2, 1, 3))
    assert table.procs == ((0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2))
    assert [table.proc(m, r) for m, r in table.procs] == list(range(6))
    assert [table.model_of(p) for p in range(6)] == [0, 0, 1, 2, 2, 2]
    assert list(table.procs_of(2)) == [3, 4, 5]
    assert table.proc_of_request(2, {PIN_KEY: [1, 0, 2]}) == 5
    assert table.has_replicas and table.num_procs == 6


def test_one_replica_each_is_process_m_for_model_m():
    table = ReplicaTable.single(3)
    assert not table.has_replicas
    assert [table.proc(m) for m in range(3)] == [0, 1, 2]
    assert table.proc_of_request(1, {}) == 1  # no pins needed


def test_least_loaded_takes_the_lowest_index_among_equals():
    assert least_loaded([3, 1, 1, 2]) == 1
    assert least_loaded([0, 0]) == 0
    assert least_loaded([5]) == 0


def test_pin_chooses_per_model_by_process_load():
    table = ReplicaTable((2, 3))
    # loads by process: model 0 -> [4, 2], model 1 -> [7, 7, 1]
    assert table.pin([4, 2, 7, 7, 1]) == (1, 2)


def test_a_replica_without_room_is_passed_over_even_when_least_loaded():
    assert least_loaded([0, 5, 3], room=[False, True, True]) == 2
    assert least_loaded([0, 5], room=[False, False]) == 0  # none has room: the rule as without room
    table = ReplicaTable((2, 2))
    assert table.pin([1, 9, 0, 4], room=[False, True, True, True]) == (1, 0)


@pytest.mark.parametrize("replicas", [(), (1, 0)])
def test_a_model_without_a_replica_is_refused(replicas):
    with pytest.raises(ConfigError, match="replicas"):
        ReplicaTable(replicas)
