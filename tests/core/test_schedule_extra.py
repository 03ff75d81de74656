"""``RoutingProgram.check_extra``: what a request may bring in ``routing_extra`` is checked before it reaches a
model (the schedule program reads it; a bad value would otherwise fail inside a step)."""

import pytest

from trcore import PROGRAMS


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


def test_programs_that_read_no_extra_accept_anything():
    PROGRAMS.get("rstitch").check_extra({"anything": [1, {"x": None}]}, 2)
