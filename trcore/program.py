"""The routing-program interface (route / send / receive) and the registry of programs by name."""

from __future__ import annotations

import importlib
import numbers
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from trcore.errors import ConfigError, ProgramError
from trcore.request import PeerReq, Request
from trcore.step import Batch, Routing, StepResult

#: Steps of one request on one model in a row without a token (dropped here, none kept elsewhere) before its routing
#: program is taken to be broken.
MAX_STEPS_WITHOUT_TOKEN = 10_000
#: Signals a backend may supply in a ``StepResult``.
KNOWN_SIGNALS = frozenset({"token_ids", "top_logprobs", "entropy", "hidden"})


class RoutingProgram:
    """A routing algorithm as seen by one model (``model``) of ``num_models``.

    Subclasses implement :meth:`route`; :meth:`send` and :meth:`receive` have defaults that move exactly the
    tokens the peer has not seen and commit them all. One instance serves one model; per-request state a
    program needs on several models travels in ``Request.extra`` (copied into ``PeerReq.extra``). Keys a request
    brings that the program only reads (:attr:`fixed_extra_keys`) travel once, with the request's spec, to a model
    that has never seen it; every other key travels with every hand-off.
    """

    #: Registry name; set by :func:`register_program`.
    name: ClassVar[str] = ""
    #: Signals :meth:`route` reads from the step result (an instance may narrow or widen it, e.g. by model).
    required_signals: frozenset[str] = frozenset({"token_ids"})
    #: Keys of ``Request.extra`` that the request brings and no model changes (e.g. a whole routing schedule):
    #: a model that has the request keeps its own copy, so hand-offs to it and step reports leave them out.
    fixed_extra_keys: ClassVar[frozenset[str]] = frozenset()
    #: Keys of ``Request.extra`` a client may send (HTTP ``routing_extra``) because this program reads them;
    #: :meth:`check_extra` refuses any other, so nothing a client sends is silently ignored. A program of one's
    #: own that reads keys names them here.
    client_extra_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, model: int, num_models: int) -> None:
        if not 0 <= model < num_models:
            raise ConfigError("model", f"index {model} outside 0..{num_models - 1}")
        self.model = model
        self.num_models = num_models

    @classmethod
    def check_extra(cls, extra: Mapping[str, Any], num_models: int) -> None:
        """Raise ValueError (naming the key) when a request's ``extra`` (HTTP ``routing_extra``) is not
        usable by this program; front ends call it at admission, so a bad value never reaches a model. The
        default refuses keys outside :attr:`client_extra_keys`; a program that reads ``extra`` also checks the
        values (calling this first)."""
        unread = sorted(set(extra) - cls.client_extra_keys)
        if unread:
            reads = ", ".join(sorted(cls.client_extra_keys)) or "no key"
            raise ValueError(f"routing_extra.{unread[0]}: routing program {cls.name or cls.__name__!r} reads "
                             f"{reads}; it would be ignored")  # fmt: skip

    def route(self, step: StepResult) -> Routing:
        """For every request of the step: the model that continues it, and whether its token is kept."""
        raise NotImplementedError

    def send(self, request: Request, destination: int) -> PeerReq:
        """Build the hand-off to ``destination``: the tokens it has not consumed, plus what it needs."""
        start = request.anchors[destination]
        return PeerReq(
            request.spec.request_id,
            start,
            tuple(request.token_ids[start:]),
            tuple(request.anchors),
            self.model,
            request.spec if start == 0 else None,
            False,
            dict(request.extra) if start == 0 else self.moving_extra(request),
        )

    def moving_extra(self, request: Request) -> dict[str, Any]:
        """The part of ``request.extra`` that can change on its way: all of it but :attr:`fixed_extra_keys`."""
        fixed = self.fixed_extra_keys
        if not fixed:
            return dict(request.extra)
        return {key: value for key, value in request.extra.items() if key not in fixed}

    def receive(self, request: Request, peer_req: PeerReq) -> None:
        """Apply a hand-off to this model's record of the request: commit all transferred tokens."""
        del request.token_ids[peer_req.start :]
        request.token_ids.extend(peer_req.token_ids)
        request.anchors[:] = peer_req.anchors
        request.extra.update(peer_req.extra)

    def release(self, request_id: str) -> None:
        """The request left this model for good (finished or aborted): drop any per-request state."""


ProgramFactory = Callable[..., RoutingProgram]
P = TypeVar("P", bound=type[RoutingProgram])


class ProgramRegistry:
    """Routing programs by name; lookup errors list the valid names."""

    def __init__(self) -> None:
        self._programs: dict[str, type[RoutingProgram]] = {}

    def register(self, name: str) -> Callable[[P], P]:
        def decorate(cls: P) -> P:
            if name in self._programs:
                raise ValueError(f"routing program {name!r} registered twice")
            cls.name = name
            self._programs[name] = cls
            return cls

        return decorate

    def get(self, name: str) -> type[RoutingProgram]:
        """The program registered as ``name``, or a user's class by import path (``"package.module:ClassName"``,
        the module looked up from the current directory too, as uvicorn does); anything else is a ConfigError
        listing the valid names."""
        if name in self._programs:
            return self._programs[name]
        if ":" in name:
            return self._import(name)
        valid = ", ".join(sorted(self._programs)) or "(none)"
        raise ConfigError(
            "router", f"unknown routing program {name!r}; valid: {valid}, or a 'package.module:ClassName' of your own"
        )

    def _import(self, path: str) -> type[RoutingProgram]:
        module_name, _, attr = path.partition(":")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # ImportError, or the user's module failing as it loads
            raise ConfigError("router.program", f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
        cls = getattr(module, attr, None)
        if not (isinstance(cls, type) and issubclass(cls, RoutingProgram)):
            raise ConfigError("router.program", f"{path!r} is not a RoutingProgram subclass")
        if "name" not in vars(cls):  # not registered under a name of its own (it may subclass a built-in)
            cls.name = path
        self._programs[path] = cls
        return cls

    def names(self) -> list[str]:
        return sorted(self._programs)

    def create(self, name: str, model: int, num_models: int, **params: Any) -> RoutingProgram:
        """Instantiate program ``name`` for one model; unknown parameters are a ConfigError."""
        cls = self.get(name)
        try:
            return cls(model, num_models, **params)
        except ConfigError:
            raise
        except Exception as exc:  # a user's program checks its parameters in its own way
            raise ConfigError(f"router.{name}", f"bad parameters {sorted(params)}: {exc}") from None


#: The process-wide registry of built-in programs (read-only after import; plug-ins may add to it).
PROGRAMS = ProgramRegistry()
register_program = PROGRAMS.register


def checked_routing(program: RoutingProgram, step: StepResult, batch: Batch) -> tuple[list[int], Sequence[bool] | None]:
    """``program``'s verdict on ``batch``'s step as (destinations, keep), or a :class:`ProgramError` that says what
    was wrong: it raised, returned no :class:`Routing`, lengths other than the batch's, destinations that are not
    model indices, or it dropped the token of a request that has gained none in :data:`MAX_STEPS_WITHOUT_TOKEN`
    steps here (it would step forever)."""
    size = batch.size
    try:
        routing = program.route(step)
    except Exception as exc:
        raise ProgramError(program.name, f"route() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(routing, Routing):
        raise ProgramError(program.name, f"route() returned {type(routing).__name__}, not a Routing")
    dests, keep = routing.destinations, routing.keep
    if len(dests) != size or (keep is not None and len(keep) != size):
        lengths = f"{len(dests)} destinations" + ("" if keep is None else f" and {len(keep)} keep flags")
        raise ProgramError(program.name, f"route() returned {lengths} for a batch of {size}")
    out = [int(d) if isinstance(d, numbers.Integral) and not isinstance(d, bool) else -1 for d in dests]
    bad = next((k for k, d in enumerate(out) if not 0 <= d < program.num_models), None)
    if bad is not None:
        last = program.num_models - 1
        raise ProgramError(program.name, f"route() returned destination {dests[bad]!r}; models are 0..{last}")
    for req, kept in zip(batch.requests, keep or (), strict=False):
        if not kept and req.steps_without_token >= MAX_STEPS_WITHOUT_TOKEN:
            stuck = f"request {req.request_id} has gained no token in {MAX_STEPS_WITHOUT_TOKEN:,} steps in a row"
            raise ProgramError(program.name, stuck)
    return out, keep


def check_signals(program: RoutingProgram, available: Iterable[str]) -> None:
    """Fail clearly when a backend cannot supply what ``program`` needs."""
    missing = program.required_signals - set(available)
    if missing:
        raise ConfigError(
            "router",
            f"program {program.name!r} needs signals {sorted(missing)} that this backend does not provide",
        )
