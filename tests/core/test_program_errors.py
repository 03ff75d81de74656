"""A routing program that breaks on a step: every way a user's ``route()`` can go wrong is a ProgramError naming
the program and what was wrong, raised before the step commits anything (the batch stays running, so the driver
fails exactly its requests and the model goes on); a program that never keeps a token is caught too."""

from __future__ import annotations

import numpy as np
import pytest

from tests.factories import ScriptedProgram, make_arrival, make_step, make_subserver
from trcore import ProgramError, Routing, RoutingProgram
from trcore.program import MAX_STEPS_WITHOUT_TOKEN
from trcore.request import RequestStatus


class Verdict(RoutingProgram):
    """Returns whatever ``verdict(num_requests)`` makes of each step."""

    name = "verdict"

    def __init__(self, model: int, num_models: int, verdict=None) -> None:
        super().__init__(model, num_models)
        self.verdict = verdict

    def route(self, step):
        return self.verdict(len(step.request_ids))


def boom(n: int) -> Routing:
    raise ValueError("no idea")


@pytest.mark.parametrize(
    ("verdict", "words"),
    [(boom, "route() raised ValueError: no idea"), (lambda n: None, "returned NoneType, not a Routing"),
     (lambda n: Routing([0] * (n - 1)), "returned 1 destinations for a batch of 2"),
     (lambda n: Routing([0] * (n + 1)), "returned 3 destinations for a batch of 2"),
     (lambda n: Routing([0] * n, [True]), "2 destinations and 1 keep flags for a batch of 2"),
     (lambda n: Routing([1.0] * n), "destination 1.0"), (lambda n: Routing(["1"] * n), "destination '1'"),
     (lambda n: Routing([True] * n), "destination True"), (lambda n: Routing([-1] * n), "destination -1")],
)  # fmt: skip
def test_a_broken_verdict_is_named_and_changes_nothing(verdict, words):
    sub = make_subserver(program=Verdict(0, 2, verdict))
    for rid in ("a", "b"):
        sub.receive(make_arrival(rid, prompt=(1, 2)), 0.0)
    batch = sub.launch(0.0)
    with pytest.raises(ProgramError) as caught:
        sub.complete(batch, make_step([7, 8], ["a", "b"]), 1.0)
    assert str(caught.value).startswith("router.verdict: ") and words in str(caught.value)
    assert sub.running is batch and [r.token_ids for r in batch.requests] == [[1, 2], [1, 2]]
    assert {r.request_id for r in sub.fail(batch)} == {"a", "b"} and not sub.requests


def test_numpy_destinations_are_model_indices():
    sub = make_subserver(program=Verdict(0, 2, lambda n: Routing(np.zeros(n, dtype=np.int64), np.ones(n, bool))))
    sub.receive(make_arrival("a", prompt=(1, 2)), 0.0)
    sub.complete(sub.launch(0.0), make_step([7], ["a"]), 1.0)
    assert sub.requests["a"].token_ids == [1, 2, 7]


def test_a_program_that_never_keeps_a_token_is_stopped():
    never = ScriptedProgram(0, 2, {"a": [(0, False)] * (MAX_STEPS_WITHOUT_TOKEN + 2)})
    sub = make_subserver(program=never)
    sub.receive(make_arrival("a", prompt=(1, 2), max_tokens=4), 0.0)
    for step in range(MAX_STEPS_WITHOUT_TOKEN + 1):  # the first step finds it longer than ever seen here
        sub.complete(sub.launch(float(step)), make_step([7], ["a"]), float(step))
    assert sub.requests["a"].status is RequestStatus.WAITING
    with pytest.raises(ProgramError, match=r"router\.scripted: request a has gained no token in 10,000 steps"):
        sub.complete(sub.launch(1e5), make_step([7], ["a"]), 1e5)


def test_tokens_kept_elsewhere_are_progress():
    sub = make_subserver(program=ScriptedProgram(0, 2, {"a": [(1, False)] * 3}))
    sub.receive(make_arrival("a", prompt=(1, 2), max_tokens=50), 0.0)
    for step in range(3):  # every step here drops and hands to model 1, which writes a token and hands back
        handoffs = sub.complete(sub.launch(float(step)), make_step([7], ["a"]), float(step))
        [(_, msg)] = handoffs
        back = msg.__class__(**{**msg.__dict__, "token_ids": (*msg.token_ids, 9)})  # model 1 kept one
        sub.receive(back, float(step))
    assert sub.requests["a"].steps_without_token == 0


def test_the_simulator_stops_with_the_programs_error():
    from dataclasses import replace

    from trcore.program import PROGRAMS
    from trsim import Simulation, markov_config
    from trsim.routing import RouterConfig

    class Late(RoutingProgram):  # breaks once the run is under way
        def route(self, step):
            self.steps = getattr(self, "steps", 0) + 1
            if self.steps > 50:
                raise RuntimeError("out of ideas")
            return Routing([self.model] * len(step.request_ids))

    PROGRAMS.register("late-boom")(Late)
    try:
        config = replace(markov_config([[0.5, 0.5], [0.5, 0.5]], None, [0.01, 0.02]), router=RouterConfig("late-boom"))
        with pytest.raises(ProgramError, match=r"router\.late-boom: route\(\) raised RuntimeError: out of ideas"):
            Simulation(config).run(tokens=10_000)
    finally:
        PROGRAMS._programs.pop("late-boom", None)
