"""Replicas in one process: four subserver loops (two replicas of each of two models) over real ZeroMQ mailboxes,
the hash engine, and the front end's pinning. Every visit of a request to a model goes to its pinned replica,
answers equal the single-sequence reference, and every replica is empty afterwards (releases reached them)."""

import random
import time
from collections import defaultdict

from tests.serve.runtime.test_loop import reference
from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trcore.replicas import ReplicaTable
from trserve.engine.hash import HashEngine
from trserve.frontend.generation import Generation
from trserve.frontend.pinning import Pinning
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import Active, StepReport
from trserve.runtime.transport import FRONTEND, Mailbox

TABLE = ReplicaTable((2, 2))


class ReplicaSystem:
    """Process ``p`` runs replica ``TABLE.replica_of(p)`` of model ``TABLE.model_of(p)``; the test is the front end."""

    def __init__(self, tmp_path):
        ep = Endpoints(str(tmp_path), TABLE.num_procs, (0,) * TABLE.num_procs)
        book = ep.address_book()
        self.front = Mailbox(book[FRONTEND], {p: ep.inbox(p) for p in range(TABLE.num_procs)})
        self.pinning = Pinning(TABLE)
        self.loops = []
        for p, (model, replica) in enumerate(TABLE.procs):
            peers = {k: v for k, v in book.items() if k != p}
            sub = Subserver(ScheduleProgram(model, 2), BatchingPolicy(threshold=2, max_wait_s=0.001))
            mailbox = Mailbox(book[p], peers)
            loop = SubserverLoop(sub, HashEngine(model), mailbox, idle_poll_s=0.0, table=TABLE, replica=replica)
            self.loops.append(loop)
        self.outputs: dict[str, list[int]] = {}
        self.visits: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.gens: dict[str, Generation] = {}

    def publish(self):
        """What the front end sends each replica: the requests pinned to it."""
        for p, count in enumerate(self.pinning.pinned):
            self.front.send(p, Active(count))

    def submit(self, rid, prompt, max_tokens, extra):
        spec = RequestSpec(rid, len(prompt), max_tokens)
        gen = Generation(spec, prompt, extra)
        self.gens[rid] = gen
        pinned = self.pinning.pin(gen)
        self.publish()
        msg = PeerReq(rid, 0, tuple(prompt), (0, 0), CLIENT, spec=spec, extra=pinned)
        self.front.send(self.pinning.process(gen, 0), msg)

    def on_report(self, report: StepReport):
        self.pinning.on_report(report)
        stepped = [t[0] for t in report.tokens] + [r[0] for r in report.routes]
        stepped += [f.request_id for f in report.finished]
        for rid in stepped:
            self.visits[rid, report.model].add(report.replica)
        for done in report.finished:
            self.outputs[done.request_id] = list(done.token_ids)
            self.pinning.unpin(self.gens[done.request_id])
        self.publish()

    def run(self, until, timeout_s=60.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for loop in self.loops:
                loop.run_once()
            for msg in self.front.receive_all(0.0005):
                if isinstance(msg, StepReport):
                    self.on_report(msg)
            if until():
                return
        raise AssertionError("system did not settle")


def test_visits_go_to_the_pinned_replica_and_answers_match_the_reference(tmp_path):
    system = ReplicaSystem(tmp_path)
    rng = random.Random(7)
    requests = {f"r{i}": ([rng.randrange(200, 900) for _ in range(rng.randrange(1, 6))], rng.randrange(4, 16))
                for i in range(32)}  # fmt: skip
    for rid, (prompt, max_tokens) in requests.items():
        system.submit(rid, prompt, max_tokens, {"handoff_prob": 0.4})
    pins = {rid: system.gens[rid].pins for rid in requests}
    system.run(lambda: len(system.outputs) == len(requests) and not any(loop.sub.requests for loop in system.loops))
    for rid, (prompt, max_tokens) in requests.items():
        assert system.outputs[rid] == reference(prompt, rid, [], 0.4, max_tokens), rid
    for (rid, model), replicas in system.visits.items():
        assert replicas == {pins[rid][model]}, (rid, model, replicas)  # every visit: the pinned replica
    large_visits = {rid for rid, model in system.visits if model == 1}
    assert len(large_visits) > len(requests) // 2  # hand-offs happened: pinning was exercised across models
    # A burst of 32 admissions spreads evenly over each model's two replicas, and both step.
    for model in (0, 1):
        counts = [sum(1 for p in pins.values() if p[model] == r) for r in (0, 1)]
        assert counts == [16, 16], (model, counts)
        assert all(system.loops[p].stats.num_steps > 0 for p in TABLE.procs_of(model))
    assert system.pinning.pinned == [0, 0, 0, 0]
