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
    """The first pydantic error as ``field.path: message`` (a ConfigError raised inside a validator: its own line)."""
    first = exc.errors()[0]
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, ConfigError):
        return str(inner)
    loc = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if not loc:  # a check across fields: its message names them
        return msg
    return f"{loc}: {msg}"


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
def named_as_options(*fields: str) -> Iterator[None]:
    """A ConfigError about one of ``fields`` (the library's parameter names, e.g. ``small_layers``) names the
    command-line option the user typed instead (``--small-layers``)."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in fields:
            raise
        raise ConfigError("--" + exc.field.replace("_", "-"), exc.problem) from None
