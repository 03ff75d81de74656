"""Per-token provenance on the front end: each reassembled output token keeps the model that committed it."""

from __future__ import annotations

from trcore import RequestSpec
from trserve.frontend.generation import Generation


def _gen() -> Generation:
    return Generation(RequestSpec("r", 3, 8, frozenset(), 0.0, {}), [1, 2, 3], {})


def test_models_follow_tokens_out_of_order() -> None:
    gen = _gen()
    assert gen.accept(2, (30, 31), model=1) == []  # early: held until positions 0-1 arrive
    assert gen.accept(0, (10, 11), model=0) == [10, 11, 30, 31]
    assert gen.accept(3, (31, 40), model=0) == [40]  # the overlap is not counted twice
    assert gen.output == [10, 11, 30, 31, 40]
    assert gen.models == [0, 0, 1, 1, 0]


def test_unknown_sender_is_minus_one() -> None:
    gen = _gen()
    gen.accept(0, (5,))
    assert gen.models == [-1]
