"""A user's own routing program by import path (``"module:ClassName"``), found from the current directory."""

from __future__ import annotations

import itertools
import sys

import pytest

from trcore import ConfigError, RoutingProgram
from trcore.program import ProgramRegistry
from trcore.step import StepResult

_names = itertools.count()

PROGRAM = '''
from trcore import RoutingProgram
from trcore.programs.rstitch import RStitchProgram
from trcore.step import Routing


class Alternate(RoutingProgram):
    """Hands each request to the next model after every kept token."""

    def __init__(self, model, num_models, stride=1):
        super().__init__(model, num_models)
        self.stride = stride

    def route(self, step):
        return Routing([(self.model + self.stride) % self.num_models] * len(step.token_ids))


class Tuned(RStitchProgram):
    """A built-in with other defaults."""


NOT_A_PROGRAM = 3
'''


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module of user programs in the current directory (a new name per test: imports are cached)."""
    name = f"user_routing_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the registry adds the current directory
    return name


def test_a_class_by_import_path_is_created_with_its_parameters(module):
    registry = ProgramRegistry()
    program = registry.create(f"{module}:Alternate", 0, 3, stride=2)
    assert isinstance(program, RoutingProgram) and program.name == f"{module}:Alternate"
    assert list(program.route(StepResult(token_ids=[5, 6])).destinations) == [2, 2]
    assert registry.get(f"{module}:Alternate") is type(program)


def test_a_subclass_of_a_built_in_is_named_by_its_path_not_the_built_in(module):
    assert ProgramRegistry().get(f"{module}:Tuned").name == f"{module}:Tuned"


def test_unknown_parameters_are_a_config_error_naming_the_program(module):
    with pytest.raises(ConfigError, match=rf"router\.{module}:Alternate: bad parameters \['strides'\]"):
        ProgramRegistry().create(f"{module}:Alternate", 0, 2, strides=2)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("no_such_module_anywhere:P", "cannot import 'no_such_module_anywhere': ModuleNotFoundError"),
        ("{module}:NOT_A_PROGRAM", "is not a RoutingProgram subclass"),
        ("{module}:Missing", "is not a RoutingProgram subclass"),
        ("{module}:", "is not a RoutingProgram subclass"),
    ],
)
def test_a_bad_import_path_is_a_config_error_naming_router_program(module, path, words):
    with pytest.raises(ConfigError, match=r"router\.program") as err:
        ProgramRegistry().get(path.format(module=module))
    assert words in str(err.value)


def test_a_module_that_fails_as_it_loads_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "user_routing_broken.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ConfigError, match="cannot import 'user_routing_broken': RuntimeError: needs a GPU"):
        ProgramRegistry().get("user_routing_broken:P")


def test_an_unknown_name_says_an_import_path_is_accepted():
    with pytest.raises(ConfigError, match=r"'package\.module:ClassName'"):
        ProgramRegistry().get("nope")
