"""State probes: the front end asks every live subserver process for its state (resident requests, KV usage,
memory) and gathers the answers (``/v1/state``-style diagnostics, leak checks, crossval's idle checks)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from trserve.runtime.messages import Probe, State


class Prober:
    """Sends :class:`Probe` messages with ``send(proc, message)`` and matches the :class:`State` answers to them by
    token; a probe returns what arrived by its timeout."""

    def __init__(self, send: Callable[[int, Any], None]) -> None:
        self.send = send
        self._waiting: dict[int, tuple[asyncio.Future[list[State]], int]] = {}
        self._states: dict[int, list[State]] = {}
        self._tokens = itertools.count()

    async def ask(self, procs: Sequence[int], timeout_s: float, detail: bool) -> list[State]:
        """The states of processes ``procs``, sorted by (model, replica)."""
        if not procs:
            return []
        token = next(self._tokens)
        fut: asyncio.Future[list[State]] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (fut, len(procs))
        self._states[token] = []
        for proc in procs:
            self.send(proc, Probe(token, detail))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return self._states.get(token, [])
        finally:
            self._waiting.pop(token, None)
            self._states.pop(token, None)

    def on_state(self, state: State) -> None:
        """An answer (late ones, for a probe that timed out, are dropped)."""
        states = self._states.get(state.token)
        waiting = self._waiting.get(state.token)
        if states is None or waiting is None:
            return
        fut, expected = waiting
        states.append(state)
        if len(states) >= expected and not fut.done():
            fut.set_result(sorted(states, key=lambda s: (s.model, s.replica)))
