"""The event loop the server and the load generator run on: uvloop when it is installed, else asyncio's own.

uvloop (libuv, in C) polls, wakes tasks and writes to sockets for less CPU than asyncio's selector loop, whose
``select`` and ``_SelectorSocketTransport.write`` were the front end's largest items in the profile at N = 64
(docs/benchmarks.md, "CPU budget per committed token"). It is an optional dependency (the ``cpu`` and ``cuda``
extras install it); without it everything runs the same on asyncio's loop, and :func:`loop_name` says which.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # optional: asyncio's loop serves the same
    uvloop = None

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop's loop when installed (set ``TOKENROUTER_ASYNCIO_LOOP=asyncio`` to force
    asyncio's loop, e.g. to compare)."""
    if loop_name() == "asyncio":
        return asyncio.run(main)
    assert uvloop is not None
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`run` uses here."""
    return "asyncio" if uvloop is None or os.environ.get("TOKENROUTER_ASYNCIO_LOOP") == "asyncio" else "uvloop"
