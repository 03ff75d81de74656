"""The subserver loop and transport in one process: real ZeroMQ mailboxes, two loops, the hash engine."""

import random
import time

import pytest

from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram, random_decision
from trserve.engine.hash import HashEngine, hash_next
from trserve.frontend.generation import Generation
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import Abort, Active, Handoffs, Probe, State, StepReport
from trserve.runtime.reports import LoopStats
from trserve.runtime.transport import FRONTEND, Mailbox


def reference(prompt, rid, schedule, prob, max_tokens, seed=0):
    """One sequence, no KV: the tokens the schedule program's decisions produce."""
    seq, model, index = list(prompt), 0, 0
    while True:
        token = hash_next(model, seq).token_id
        if index < len(schedule):
            dest, kept = schedule[index]
        else:
            dest, kept = random_decision(seed, rid, index, model, 2, prob), True
        index += 1
        if kept:
            seq.append(token)
            if len(seq) - len(prompt) >= max_tokens:
                return seq[len(prompt) :]
        model = dest


class System:
    """Two loops wired through real mailboxes; the test plays the front end."""

    def __init__(self, tmp_path, threshold=1, max_wait_s=0.001):
        ep = Endpoints(str(tmp_path), 2, (0, 0))
        book = ep.address_book()
        self.front = Mailbox(book[FRONTEND], {m: ep.inbox(m) for m in range(2)})
        self.engines = [HashEngine(m) for m in range(2)]
        self.loops = []
        for m in range(2):
            peers = {k: v for k, v in book.items() if k != m}
            sub = Subserver(ScheduleProgram(m, 2), BatchingPolicy(threshold=threshold, max_wait_s=max_wait_s))
            self.loops.append(SubserverLoop(sub, self.engines[m], Mailbox(book[m], peers), idle_poll_s=0.0))
        self.outputs, self.reports = {}, []

    def publish(self, count):
        """What the front end sends each subserver when the active count changes."""
        for m in range(2):
            self.front.send(m, Active(count))

    def submit(self, rid, prompt, max_tokens, extra):
        spec = RequestSpec(rid, len(prompt), max_tokens)
        self.front.send(0, PeerReq(rid, 0, tuple(prompt), (0, 0), CLIENT, spec=spec, extra=extra))

    def run(self, until, timeout_s=30.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for loop in self.loops:
                loop.run_once()
            for msg in self.front.receive_all(0.0005):
                self.reports.append(msg)
                if isinstance(msg, StepReport):
                    self.outputs.update({f.request_id: list(f.token_ids) for f in msg.finished})
            if until():
                return
        raise AssertionError("system did not settle")


def test_random_handoffs_match_reference_and_release_everything(tmp_path):
    system = System(tmp_path, threshold=2)
    rng = random.Random(1)
    requests = {f"r{i}": ([rng.randrange(200, 900) for _ in range(rng.randrange(1, 6))], rng.randrange(1, 12))
                for i in range(24)}  # fmt: skip
    system.publish(len(requests))
    for rid, (prompt, max_tokens) in requests.items():
        system.submit(rid, prompt, max_tokens, {"handoff_prob": 0.4, "schedule": [[1, False]] if rid == "r3" else []})
    system.run(lambda: len(system.outputs) == len(requests) and not any(loop.sub.requests for loop in system.loops))
    for rid, (prompt, max_tokens) in requests.items():
        schedule = [[1, False]] if rid == "r3" else []
        assert system.outputs[rid] == reference(prompt, rid, schedule, 0.4, max_tokens), rid
    assert all(loop.sub.requests == {} for loop in system.loops)
    assert all(engine.kv == {} for engine in system.engines)  # every model freed every request
    assert sum(loop.stats.num_handoffs for loop in system.loops) > 20


def test_a_step_sends_each_peer_one_message_with_all_its_handoffs(tmp_path):
    """Eight requests stepped together on model 0, all sent to model 1 by their first decision: one Handoffs
    message carries all eight (in the batch's order); model 1 finishes them in one batch and releases them on
    model 0 in one message too. The outputs are the reference's."""
    system = System(tmp_path, threshold=8, max_wait_s=60.0)  # both models wait for all eight
    sent: list[tuple[int, int, object]] = []
    for loop in system.loops:  # record every send (no reference back to the loop: a cycle would keep its sockets)
        send, model = loop.mailbox.send, loop.model
        loop.mailbox.send = lambda dest, msg, model=model, send=send: (sent.append((model, dest, msg)), send(dest, msg))
    system.publish(8)
    ids = [f"h{i}" for i in range(8)]
    for i, rid in enumerate(ids):
        system.submit(rid, [500 + i, 7], 3, {"schedule": [[1, True]], "handoff_prob": 0.0})
    system.run(lambda: len(system.outputs) == 8 and not any(loop.sub.requests for loop in system.loops))
    peer = [(src, msg) for src, dest, msg in sent if dest != FRONTEND]
    assert [src for src, _ in peer] == [0, 1]
    assert all(isinstance(msg, Handoffs) and sorted(r.request_id for r in msg.requests) == ids for _, msg in peer)
    assert [r.is_finished for r in peer[1][1].requests] == [True] * 8  # the releases
    for i, rid in enumerate(ids):
        assert system.outputs[rid] == reference([500 + i, 7], rid, [[1, True]], 0.0, 3), rid


def test_received_handoffs_report_their_transit(tmp_path):
    """A Handoffs message stamped 0.25 s before it was put on the wire: the receiving model's next step report
    counts it and at least those 0.25 s of transit; the steps of model 0, which received none, report none."""
    system = System(tmp_path)
    system.publish(1)
    spec = RequestSpec("t1", 2, 2)
    req = PeerReq("t1", 0, (500, 7), (0, 0), 0, spec=spec, extra={"schedule": [], "handoff_prob": 0.0})
    stamped = time.time() - 0.25
    system.front.send(1, Handoffs((req,), sent_at=stamped))
    system.run(lambda: "t1" in system.outputs)
    steps = [r for r in system.reports if isinstance(r, StepReport)]
    received = [r for r in steps if r.handoffs_received]
    assert [r.model for r in received] == [1] and received[0].handoffs_received == 1
    assert 0.25 <= received[0].handoff_transit_s <= time.time() - stamped
    assert received[0].handoffs_late == 0  # model 1 had not launched anything since it was sent
    assert not any(r.handoff_transit_s for r in steps if r.model == 0)


def test_transit_counts_from_the_end_of_the_step_in_progress_and_late_messages_missed_a_launch():
    """A message sent 10 s ago to a receiver that has since launched and finished a step: its wait is counted from
    that step's end (about 0 s, not 10), and it missed that launch. A message to an idle receiver waits from its
    sending."""
    sent_at = time.time() - 10.0
    busy = LoopStats()
    busy.launched()
    busy.stepped()
    busy.received(Handoffs((), sent_at=sent_at))
    assert busy.take_transit() == {"handoffs_received": 1, "handoff_transit_s": pytest.approx(0.0, abs=1.0),
                                   "handoffs_late": 1}  # fmt: skip
    idle = LoopStats()
    idle.received(Handoffs((), sent_at=sent_at))
    taken = idle.take_transit()
    assert taken["handoff_transit_s"] >= 10.0 and taken["handoffs_late"] == 0
    assert idle.take_transit() == {"handoffs_received": 0, "handoff_transit_s": 0.0, "handoffs_late": 0}


def test_streamed_tokens_reassemble_to_the_final_output(tmp_path):
    system = System(tmp_path)
    system.submit("s", [300, 301], 10, {"handoff_prob": 0.5})
    system.run(lambda: "s" in system.outputs)
    gen = Generation(RequestSpec("s", 2, 10), [300, 301], {})
    pieces = [(off, toks) for r in system.reports if isinstance(r, StepReport) for rid, off, toks in r.tokens]
    streamed = []
    for offset, tokens in reversed(pieces):  # worst case: every report arrives out of order
        streamed.extend(gen.accept(offset, tokens))
    assert gen.output == system.outputs["s"][: len(gen.output)]
    assert len(gen.output) == len(system.outputs["s"]) - 1  # the finishing step's token comes with Finished


def test_abort_frees_every_model_and_drops_late_handoffs(tmp_path):
    system = System(tmp_path)
    system.submit("a", [400, 401, 402], 1000, {"handoff_prob": 0.5})
    system.run(lambda: all(loop.stats.num_steps > 5 for loop in system.loops))
    for m in range(2):
        system.front.send(m, Abort("a"))
    system.run(lambda: all(not loop.sub.requests for loop in system.loops) and not any(e.kv for e in system.engines))
    steps = [loop.stats.num_steps for loop in system.loops]
    for _ in range(20):  # nothing keeps running after the abort
        for loop in system.loops:
            loop.run_once()
    assert [loop.stats.num_steps for loop in system.loops] == steps
    system.front.send(0, Probe(7))
    system.run(lambda: any(isinstance(r, State) for r in system.reports))
    state = next(r for r in system.reports if isinstance(r, State))
    assert (state.token, state.num_resident, state.kv_usage) == (7, 0, 0.0) and state.rss_bytes > 0
