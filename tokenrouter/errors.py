"""Turning bad input into one clear line on stderr and exit status 2."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import typer

from trcore.errors import ConfigError, ProgramError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on one line and exit with status 2."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    raise typer.Exit(2)


def describe_validation_error(exc: Any) -> str:
    """The first pydantic error as ``field.path: message`` (a ConfigError raised inside a validator: its own line).
    A value that fits no member of a union (``thresholds: autoo``) names every member's want, not the first's."""
    errors = exc.errors()
    first = errors[0]
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, ConfigError):
        return str(inner)
    loc, msg = tuple(first.get("loc", ())), _message(first)
    cut = next((i for i, part in enumerate(loc) if _is_union_tag(part)), None)
    if cut is not None:
        members = [e for e in errors if len(e["loc"]) > cut and tuple(e["loc"][:cut]) == loc[:cut]]
        deeper = [e for e in members if len(e["loc"]) > cut + 1]  # the value has this member's shape: its error
        if deeper:
            loc, msg = tuple(deeper[0]["loc"]), _message(deeper[0])
        else:
            wants = [_message(e).removeprefix("Input should be ") for e in members]
            loc, msg = loc[:cut], "Input should be " + " or ".join(dict.fromkeys(wants))
    path = ".".join(str(p) for p in loc if not _is_union_tag(p))
    return f"{path}: {msg}" if path else msg  # no path: a check across fields, whose message names them


def _message(error: Any) -> str:
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def _is_union_tag(part: Any) -> bool:
    """Whether a pydantic error location part names a union's member (``list[int]``, ``float``, ``constrained-int``,
    a section's class such as ``LengthSpec``), not a field (snake_case, or ``P``, ``P_high``)."""
    if not isinstance(part, str) or part == "[key]":
        return False
    camel = part[:1].isupper() and any(c.islower() for c in part) and "_" not in part
    return camel or "[" in part or "-" in part or part in ("int", "float", "str", "bool", "dict", "list")


def cli_errors(fn: F) -> F:
    """Decorate a command so bad input exits 2 with one line instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, ProgramError) as exc:  # a broken routing program: the simulator's run cannot go on
            fail(str(exc))
        except json.JSONDecodeError as exc:
            fail(f"invalid JSON: {exc.msg} at position {exc.pos}")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError) as exc:
            fail(f"{exc.filename}: {exc.strerror}")
        except Exception as exc:
            if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors"):
                fail(describe_validation_error(exc))
            raise

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def named_as_options(*fields: str, option: str | None = None) -> Iterator[None]:
    """A ConfigError about one of ``fields`` (the library's parameter names, e.g. ``small_layers``) names the
    command-line option the user typed instead (``--small-layers``); with ``option``, that option, whose value
    held the field, which the problem then names (``--models: shape: unknown shape 'x'``)."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in fields:
            raise
        if option is not None:
            raise ConfigError(option, f"{exc.field}: {exc.problem}") from None
        raise ConfigError("--" + exc.field.replace("_", "-"), exc.problem) from None
