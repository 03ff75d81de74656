"""``RoutingProgram.check_extra``: what a request may bring in ``routing_extra`` is checked before it reaches a
model (the schedule program reads it; a bad value would otherwise fail inside a step)."""

import pytest

from trcore import PROGRAMS, Request, RequestSpec
from trcore.programs.schedule import ScheduleProgram


@pytest.mark.parametrize(
    "extra",
    [{}, {"schedule": [[1, True], [0, False]]}, {"handoff_prob": 0.5, "decision_key": "k"}, {"decision_key": 7}],
)
def test_usable_extras_pass(extra):
    PROGRAMS.get("schedule").check_extra(extra, 2)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"schedule": [[2, True]]}, "destination must be in 0..1"),
        ({"schedule": [[1, 1]]}, "kept a bool"),
        ({"schedule": [["1", True]]}, "[destination, kept]"),
        ({"schedule": 5}, "must be a list"),
        ({"handoff_prob": 1.5}, "handoff_prob"),
        ({"handoff_prob": None}, "handoff_prob"),
        ({"decision_key": [1]}, "decision_key"),
        ({"schedule_step": 3}, "may not be sent"),
    ],
)
def test_unusable_extras_are_refused(extra, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(".", r"\.")):
        PROGRAMS.get("schedule").check_extra(extra, 2)


@pytest.mark.parametrize("name", ["markov", "trace", "rstitch", "mixture", "r2r", "citer", "colllm"])
def test_a_key_no_program_reads_is_refused_not_ignored(name):
    PROGRAMS.get(name).check_extra({}, 2)
    with pytest.raises(ValueError, match=rf"routing_extra\.handof_prob: routing program '{name}' reads no key"):
        PROGRAMS.get(name).check_extra({"handof_prob": 0.5}, 2)


def test_a_misspelled_key_beside_the_schedule_programs_own_is_refused():
    with pytest.raises(ValueError, match=r"routing_extra\.handof_prob: .* reads decision_key, handoff_prob, schedule"):
        PROGRAMS.get("schedule").check_extra({"decision_key": "k", "handof_prob": 0.5}, 2)


def test_a_schedule_travels_to_a_model_once_then_only_its_step_index():
    """A request's schedule goes with its spec to a model that has never seen it; later hand-offs carry the state
    that changes (the step index, anything else) and the receiver keeps the schedule it has."""
    spec = RequestSpec("r", 2, 8)
    schedule = [[1, True], [0, True], [1, True]]
    req = Request(spec=spec, token_ids=[5, 6, 7], anchors=[2, 0], extra={"schedule": schedule, "k": 3})
    small, large = ScheduleProgram(0, 2), ScheduleProgram(1, 2)
    req.extra["schedule_step"] = 1
    first = small.send(req, 1)
    assert first.spec == spec and first.extra == {"schedule": schedule, "k": 3, "schedule_step": 1}
    held = Request(spec=spec, token_ids=[], anchors=[2, 0])
    large.receive(held, first)

    req.anchors[1], req.extra["schedule_step"] = 3, 3
    req.token_ids += [8, 9]
    later = small.send(req, 1)
    assert later.spec is None and later.extra == {"k": 3, "schedule_step": 3}
    large.receive(held, later)
    assert held.token_ids == [5, 6, 7, 8, 9] and held.extra == {"schedule": schedule, "k": 3, "schedule_step": 3}
    assert small.moving_extra(req) == {"k": 3, "schedule_step": 3}


def test_programs_without_fixed_keys_send_their_whole_extra():
    program = PROGRAMS.create("markov", 0, 2, P=[[0.5, 0.5], [0.5, 0.5]])
    req = Request(spec=RequestSpec("r", 1, 4), token_ids=[1, 2], anchors=[1, 1], extra={"a": 1})
    assert program.send(req, 1).extra == {"a": 1} and program.moving_extra(req) == {"a": 1}
