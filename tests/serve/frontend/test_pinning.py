"""The front end's pinning: a burst of admissions spreads over a model's replicas, a long queue steers new requests
away, an ended request stops counting, and each replica's threshold-table count is the requests pinned to it."""

from trcore import RequestSpec
from trcore.replicas import PIN_KEY, ReplicaTable
from trserve.frontend.generation import Generation
from trserve.frontend.pinning import Pinning
from trserve.runtime.messages import StepReport

TABLE = ReplicaTable((3, 1))  # small x3 (processes 0-2), large x1 (process 3)


def make() -> Pinning:
    return Pinning(TABLE)


def gen(i: int) -> Generation:
    return Generation(RequestSpec(f"r{i}", 3, 8), [1, 2, 3], {"decision_key": i})


def test_a_burst_spreads_round_robin_and_each_replica_counts_its_pins():
    pinning = make()
    gens = [gen(i) for i in range(7)]
    extras = [pinning.pin(g) for g in gens]
    assert [g.pins for g in gens] == [(0, 0), (1, 0), (2, 0), (0, 0), (1, 0), (2, 0), (0, 0)]
    assert extras[4] == {"decision_key": 4, PIN_KEY: [1, 0]}  # the request's own extra is kept
    assert pinning.pinned == [3, 2, 2, 7]
    assert [pinning.process(g, 0) for g in gens[:3]] == [0, 1, 2]
    for g in gens[:3]:
        pinning.unpin(g)
    assert pinning.pinned == [2, 1, 1, 4]


def test_a_reported_queue_steers_new_requests_elsewhere():
    pinning = make()
    pinning.on_report(StepReport(0, 4, 4, 0.01, 5, 5, 0, 0.0, replica=0))  # replica 0 has 5 ready
    pinning.on_report(StepReport(0, 1, 1, 0.01, 1, 1, 0, 0.0, replica=2))
    assert [pinning.pin(gen(i))[PIN_KEY][0] for i in range(4)] == [1, 1, 2, 1]
    pinning.forget_queue(0)  # replica 0 died: its queue went with it
    assert pinning.loads()[:3] == [0, 3, 2]


def test_a_replica_at_its_max_num_seqs_takes_no_more_pins_whatever_its_queue():
    pinning = Pinning(TABLE, caps=[2, 2, 2, 6])
    pinning.on_report(StepReport(0, 4, 4, 0.01, 5, 5, 0, 0.0, replica=1))  # replica 1 has 5 ready
    pinning.on_report(StepReport(0, 4, 4, 0.01, 5, 5, 0, 0.0, replica=2))
    gens = [gen(i) for i in range(6)]
    assert [pinning.pin(g)[PIN_KEY][0] for g in gens] == [0, 0, 1, 2, 1, 2]  # replica 0 full after two
    assert pinning.pinned == [2, 2, 2, 6]
    pinning.unpin(gens[3])  # on replica 2
    assert pinning.pin(gen(9))[PIN_KEY][0] == 2  # the freed place, though replica 0 has no queue
