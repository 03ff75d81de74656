"""The front end's recovery, without engines: a report it cannot handle fails its requests (500) instead of leaving
them hanging; the watchdog fails a stalled request (504, counted); a restart suspends every request and resumes it
where it was (same id, committed output as prompt, the routing state of its last step), and new requests wait."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.serve.runtime.test_loop import reference
from trcore import BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trserve.engine.hash import HashEngine
from trserve.frontend.book import FrontEnd
from trserve.frontend.generation import Generation
from trserve.frontend.metrics import Metrics
from trserve.frontend.recovery import Recovery
from trserve.frontend.streaming import GenerationFailed
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import Abort, Failed, Finished, Rewire, StepReport
from trserve.runtime.transport import FRONTEND, Mailbox


class Bench:
    """A front end wired to two in-test model inboxes over real ZeroMQ sockets."""

    def __init__(self, tmp_path: Any, max_active: int = 4) -> None:
        ep = Endpoints(str(tmp_path), 2)
        book = ep.address_book()
        self.models = [Mailbox(book[m], {FRONTEND: book[FRONTEND]}) for m in range(2)]
        self.metrics = Metrics(["large", "small"])
        # No counts (0 subservers): the tests here read exactly what the front end sends the two models.
        self.fe = FrontEnd(book[FRONTEND], {m: book[m] for m in range(2)}, 0, 2, 0, self.metrics, max_active, 4)
        self.recovery = Recovery(self.fe, self.metrics, stall_timeout_s=5.0)

    def submit(self, rid: str, prompt: list[int], max_tokens: int = 10, extra: dict | None = None) -> Generation:
        return self.fe.submit(RequestSpec(rid, len(prompt), max_tokens), prompt, extra or {})

    def received(self, model: int, count: int = 1) -> list[Any]:
        """What model ``model`` received: at least ``count`` messages unless 2 s pass first (two sends in a row
        may arrive in two batches on a loaded machine)."""
        out: list[Any] = []
        deadline = time.monotonic() + 2.0
        while len(out) < count and time.monotonic() < deadline:
            out += self.models[model].receive_all(max(0.0, deadline - time.monotonic()))
        return out

    def close(self) -> None:
        for box in self.models:
            box.close()


def report(model: int, **fields: Any) -> StepReport:
    return StepReport(model, 1, 1, 0.01, 0, 1, 0, 0.0, **fields)


def drain(gen: Generation) -> list[tuple[str, Any]]:
    out = []
    while not gen.events.empty():
        out.append(gen.events.get_nowait())
    return out


def test_a_report_that_cannot_be_handled_fails_its_requests(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path)
        gen = b.submit("a", [1, 2, 3])
        other = b.submit("b", [4, 5])
        assert [type(m) for m in b.received(0, count=2)] == [PeerReq, PeerReq]

        def broken(_: StepReport) -> None:
            raise RuntimeError("a bug in report handling")

        b.metrics.observe_step = broken  # type: ignore[method-assign]
        b.fe.start()
        b.models[0].send(FRONTEND, report(0, tokens=[("a", 0, (7,))]))
        kind, failure = await asyncio.wait_for(gen.events.get(), 5.0)
        assert kind == "error" and failure.status == 500
        assert GenerationFailed(failure).status == 500
        assert Abort("a") in b.received(0) and Abort("a") in b.received(1)
        assert "a" not in b.fe.generations and "b" in b.fe.generations and other.events.empty()
        await b.fe.close()
        b.close()

    asyncio.run(scenario())


def test_watchdog_fails_a_stalled_request_with_504_only_while_models_are_up(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path)
        gen = b.submit("a", [1, 2, 3])
        start = gen.last_progress
        b.recovery.check_stalls(start + 4.0)
        assert not drain(gen)
        b.fe.down[1] = "restarting"
        b.recovery.check_stalls(start + 60.0)
        assert not drain(gen)
        del b.fe.down[1]
        b.recovery.check_stalls(start + 6.0)
        [(kind, failure)] = drain(gen)
        assert kind == "error" and failure.status == 504 and "server.stall_timeout_s" in failure.message
        assert "tokenrouter_requests_stalled_total 1.0" in b.metrics.render().decode()
        assert b.fe.num_active == 0
        b.close()

    asyncio.run(scenario())


def test_watchdog_spares_a_request_a_model_holds_ready_while_the_models_step(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path)
        queued, lost = b.submit("q", [1, 2, 3]), b.submit("l", [4, 5])
        start = max(queued.last_progress, lost.last_progress)
        b.recovery.check_stalls(start + 6.0, frozenset({"q"}), num_steps=10)  # waiting for a batch or for KV
        assert not drain(queued) and queued.last_progress == start + 6.0
        [(kind, failure)] = drain(lost)  # held ready nowhere: a lost message
        assert kind == "error" and failure.status == 504
        b.recovery.check_stalls(start + 10.0, frozenset({"q"}), num_steps=12)  # the models stepped meanwhile
        assert not drain(queued)
        b.recovery.check_stalls(start + 16.5, frozenset({"q"}), num_steps=12)  # no step anywhere for 6.5 s
        [(kind, failure)] = drain(queued)
        assert kind == "error" and failure.status == 504
        assert "tokenrouter_requests_stalled_total 2.0" in b.metrics.render().decode()
        b.close()

    asyncio.run(scenario())


def test_restart_suspends_then_resumes_where_the_request_was(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path)
        gen = b.submit("a", [1, 2, 3], max_tokens=6, extra={"handoff_prob": 0.5})
        b.received(0)
        b.fe.handle(report(0, tokens=[("a", 0, (7, 8))], routes=[("a", 1, 2, {"handoff_prob": 0.5, "k": 2})]))
        assert drain(gen) == [("tokens", [7, 8])]
        # Model 0's report of token 2 is lost with it; model 1 already stepped on from it: not a resume point.
        b.fe.handle(report(1, tokens=[("a", 3, (9,))], routes=[("a", 0, 4, {"handoff_prob": 0.5, "k": 4})]))
        assert gen.output == [7, 8]

        b.recovery.model_down(1, "'small' exited unexpectedly and is restarting", restarting=True)
        assert Abort("a") in b.received(0)
        waiting = b.submit("w", [9])  # admitted, waits for the restart
        assert not waiting.is_dispatched
        b.fe.handle(report(0, failed=[Failed("a", "stale: the old incarnation")]))
        assert not drain(gen) and gen.is_suspended

        b.recovery.model_up(1)
        [resumed] = b.received(1)
        assert resumed.request_id == "a" and resumed.token_ids == (1, 2, 3, 7, 8) and resumed.extra["k"] == 2
        assert resumed.spec.num_prompt_tokens == 5 and resumed.spec.max_tokens == 4
        assert [m.request_id for m in b.received(0)] == ["w"]

        b.fe.handle(report(1, tokens=[("a", 0, (10,))]))
        b.fe.handle(report(1, tokens=[("a", 1, (11, 12))]))
        b.fe.handle(report(1, finished=[Finished("a", (10, 11, 12, 13), "length")]))
        assert gen.output == [7, 8, 10, 11, 12, 13]
        assert drain(gen) == [("tokens", [10]), ("tokens", [11, 12]), ("tokens", [13]), ("done", "length")]
        assert "tokenrouter_requests_resumed_total 1.0" in b.metrics.render().decode()
        b.close()

    asyncio.run(scenario())


def test_a_finish_that_overtakes_a_peers_report_waits_for_it(tmp_path):
    """Model 0 commits token 8 and hands the request to model 1, which commits the last token (9) and reports
    before model 0 does: the request ends when token 8 is here, each token credited to the model that wrote it."""

    async def scenario() -> None:
        b = Bench(tmp_path)
        gen = b.submit("a", [1, 2], max_tokens=3)
        b.fe.handle(report(0, tokens=[("a", 0, (7,))]))
        b.fe.handle(report(1, finished=[Finished("a", (7, 8, 9), "length")]))
        assert drain(gen) == [("tokens", [7])] and "a" in b.fe.generations
        b.fe.handle(report(0, tokens=[("a", 1, (8,))]))
        assert drain(gen) == [("tokens", [8, 9]), ("done", "length")] and "a" not in b.fe.generations
        assert gen.models == [0, 0, 1]
        b.close()

    asyncio.run(scenario())


def test_a_resume_point_without_the_schedule_resumes_with_the_requests_own(tmp_path):
    """Step reports leave out what a request brought and no model changes (its schedule): the resumed request
    gets it back from the front end's copy, with the route's step index."""

    async def scenario() -> None:
        b = Bench(tmp_path)
        schedule = [[1, True], [0, True], [1, True], [0, True]]
        gen = b.submit("a", [1, 2], max_tokens=6, extra={"schedule": schedule})
        b.received(0)
        b.fe.handle(report(0, tokens=[("a", 0, (7,))], routes=[("a", 1, 1, {"schedule_step": 1})]))
        b.recovery.model_down(1, "restarting", restarting=True)
        b.fe.handle(report(0, failed=[Failed("a", "stale: the old incarnation")]))
        b.recovery.model_up(1)
        [resumed] = [m for m in b.received(1) if m.request_id == "a"]
        assert resumed.extra["schedule"] == schedule and resumed.extra["schedule_step"] == 1
        assert resumed.token_ids == (1, 2, 7) and gen.output == [7]
        b.close()

    asyncio.run(scenario())


def test_a_request_complete_before_the_crash_finishes_on_resume(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path)
        gen = b.submit("a", [1], max_tokens=2)
        b.fe.handle(report(0, tokens=[("a", 0, (7, 8))]))
        b.recovery.model_down(0, "restarting", restarting=True)
        b.recovery.model_up(0)
        assert drain(gen)[-1] == ("done", "length") and "a" not in b.fe.generations
        b.close()

    asyncio.run(scenario())


def test_without_a_restart_every_request_fails_with_503(tmp_path):
    async def scenario() -> None:
        b = Bench(tmp_path, max_active=1)
        running, queued = b.submit("a", [1]), b.submit("b", [2])
        b.recovery.model_down(1, "'small' exited (status -9); restarts disabled or used up", restarting=False)
        for gen in (running, queued):
            [(kind, failure)] = drain(gen)
            assert kind == "error" and failure.status == 503 and "restarts disabled" in str(failure)
        assert not b.fe.generations and b.fe.num_active == 0
        b.close()

    asyncio.run(scenario())


class Model:
    """One subserver loop on the hash engine, in this process (``generation``: its incarnation)."""

    def __init__(self, ep: Endpoints, model: int, generation: int = 0) -> None:
        ep = ep.with_generation(model, generation)
        book = ep.address_book()
        self.address = book[model]
        sub = Subserver(ScheduleProgram(model, 2), BatchingPolicy(threshold=1, max_wait_s=0.001))
        self.mailbox = Mailbox(self.address, {k: v for k, v in book.items() if k != model})
        self.loop = SubserverLoop(sub, HashEngine(model), self.mailbox, idle_poll_s=0.0)


def test_killed_model_resumes_every_request_with_the_uninterrupted_tokens(tmp_path):
    """Two loops and a front end in one process; model 0 "dies" (its loop and inbox vanish) mid-way and comes back
    as a new incarnation: every request completes with exactly the tokens of the schedule program's reference."""

    async def scenario() -> dict[str, list[int]]:
        ep = Endpoints(str(tmp_path), 2)
        models = [Model(ep, 0), Model(ep, 1)]
        metrics = Metrics(["large", "small"])
        fe = FrontEnd(ep.frontend, {m: ep.inbox(m) for m in range(2)}, 0, 2, 2, metrics, 16, 16)
        recovery = Recovery(fe, metrics, stall_timeout_s=None)
        fe.start()
        gens = {f"r{i}": fe.submit(RequestSpec(f"r{i}", 3, 30), [300 + i, 400, 500 + i], {"handoff_prob": 0.4})
                for i in range(8)}  # fmt: skip

        async def run_until(done: Any) -> None:
            deadline = time.monotonic() + 30
            while not done():
                assert time.monotonic() < deadline, {rid: len(g.output) for rid, g in gens.items()}
                for m in models:
                    m.loop.run_once()
                await asyncio.sleep(0.001)

        await run_until(lambda: all(len(g.output) >= 5 for g in gens.values()))
        models[0].mailbox.close()  # model 0 dies with whatever it held
        recovery.model_down(0, "'large' exited unexpectedly and is restarting", restarting=True)
        for _ in range(20):
            models[1].loop.run_once()
            await asyncio.sleep(0.001)
        models[0] = Model(ep, 0, generation=1)
        fe.connect(0, models[0].address)
        fe.send(1, Rewire(0, models[0].address))
        recovery.model_up(0)
        await run_until(lambda: all(g.is_done for g in gens.values()))
        await run_until(lambda: not any(m.loop.sub.requests for m in models))  # every release arrived
        await fe.close()
        for m in models:
            m.mailbox.close()
        assert all(drain(g)[-1] == ("done", "length") for g in gens.values())
        return {rid: g.output for rid, g in gens.items()}

    outputs = asyncio.run(scenario())
    for i in range(8):
        assert outputs[f"r{i}"] == reference([300 + i, 400, 500 + i], f"r{i}", [], 0.4, 30), i
