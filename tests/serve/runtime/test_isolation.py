"""One bad request in a batch fails alone: the engine names it before anything runs, the loop fails it and steps
its batch-mates again, and they finish with exactly the tokens of an undisturbed run (hash engine here, the real
vLLM engine in the test marked ``serve``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.serve.engine_support import sample_prompts, start_engine
from trcore import CLIENT, BatchingPolicy, PeerReq, RequestSpec, Subserver
from trcore.programs.schedule import ScheduleProgram
from trserve.engine.hash import HashEngine
from trserve.engine.types import Engine, EngineStepError, StepItem, TokenOut
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.messages import StepReport

VOCAB = 49152
BAD = [1, 2, 1_000_000_000, 5]


class Inbox:
    """An in-memory mailbox: the test plays the front end and reads what the loop sends it."""

    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, message: Any) -> None:
        self.sent.append((dest, message))

    def receive_all(self, timeout_s: float | None) -> list[Any]:
        out, self.queue = self.queue, []
        return out

    def rewire(self, dest: int, address: str) -> None: ...


class VocabHashEngine(HashEngine):
    """The hash engine with the step engine's per-item vocabulary check."""

    def step(self, items: Sequence[StepItem]) -> list[TokenOut]:
        culprits = {i.request_id: "token id outside" for i in items if any(t >= VOCAB for t in i.new_token_ids)}
        if culprits:
            raise EngineStepError("bad ids", culprits)
        return super().step(items)


def read_reports(box: Inbox, outputs: dict[str, list[int]], failures: dict[str, str]) -> None:
    """Take what the loop sent: finished requests' tokens into ``outputs``, failed ones' messages into ``failures``."""
    for _, msg in box.sent:
        if isinstance(msg, StepReport):
            outputs.update({f.request_id: list(f.token_ids) for f in msg.finished})
            failures.update({f.request_id: f.message for f in msg.failed})
    box.sent.clear()


def run(engine: Engine, prompts: dict[str, list[int]], inject: dict[str, list[int]], max_tokens: int = 12):
    """Serve ``prompts`` on one loop; after three steps ``inject`` joins them. Returns outputs and failures."""
    box = Inbox()
    sub = Subserver(ScheduleProgram(0, 1), BatchingPolicy(threshold=1, max_wait_s=0.0))
    loop = SubserverLoop(sub, engine, box, idle_poll_s=0.0)

    def message(rid: str, prompt: list[int]) -> PeerReq:
        spec = RequestSpec(rid, len(prompt), max_tokens)
        return PeerReq(rid, 0, tuple(prompt), (0,), CLIENT, spec=spec)

    box.queue = [message(rid, p) for rid, p in prompts.items()]
    outputs: dict[str, list[int]] = {}
    failures: dict[str, str] = {}
    for step in range(200):
        if step == 3:
            box.queue += [message(rid, p) for rid, p in inject.items()]
        loop.run_once()
        read_reports(box, outputs, failures)
        if len(outputs) + len(failures) == len(prompts) + len(inject):
            assert not sub.requests
            return outputs, failures
    raise AssertionError("the loop did not finish its requests")


def test_bad_request_fails_alone_and_batch_mates_finish_unchanged():
    prompts = {f"r{i}": [300 + i, 400 + 7 * i, 500] for i in range(5)}
    undisturbed, none_failed = run(VocabHashEngine(0), prompts, {})
    assert not none_failed
    outputs, failures = run(VocabHashEngine(0), prompts, {"bad": BAD})
    assert list(failures) == ["bad"] and "token id outside" in failures["bad"]
    assert outputs == undisturbed


def test_an_error_naming_no_culprit_fails_the_whole_batch():
    class Broken(HashEngine):
        def step(self, items: Sequence[StepItem]) -> list[TokenOut]:
            raise EngineStepError("engine full")

    outputs, failures = run(Broken(0), {"a": [300], "b": [301]}, {})
    assert not outputs and set(failures) == {"a", "b"} and "engine full" in failures["a"]


@pytest.mark.serve
def test_real_engine_bad_token_id_fails_alone(prepared_pair):
    """A prompt with a token id outside the vocabulary joins a running batch on the real vLLM engine (float32,
    greedy): it fails with the engine's reason, the others' tokens equal an undisturbed run's."""
    prompts = {f"r{i}": p for i, p in enumerate(sample_prompts())}
    engine = start_engine(str(prepared_pair[1]))
    try:
        undisturbed, _ = run(engine, prompts, {})
        outputs, failures = run(engine, prompts, {"bad": BAD})
    finally:
        engine.close()
    assert list(failures) == ["bad"] and "token id outside 0.." in failures["bad"], failures
    assert outputs == undisturbed
