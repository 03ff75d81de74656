"""Simulated time: integer nanosecond ticks, so coinciding step ends coincide exactly (no float drift), and the
order of the events of one instant (:data:`LATE`, :func:`fire`)."""

from __future__ import annotations

import simpy
from simpy.events import NORMAL, Event

TICKS_PER_S = 1_000_000_000
#: Priority of the simulator's launch decisions: after every completion and delivery at the same instant.
LATE = NORMAL + 1
#: The longest span a run, phase or timer may be given (about 32 years; 1e300 s overflowed the tick count).
MAX_SPAN_S = 1e9


def to_ticks(seconds: float) -> int:
    """A positive duration in whole ticks (at least one, so no step or wait takes zero time)."""
    return max(round(seconds * TICKS_PER_S), 1)


def cost_ticks(seconds: float) -> int:
    """A cost in whole ticks: 0 for none, else at least one."""
    return to_ticks(seconds) if seconds > 0 else 0


def to_seconds(ticks: int) -> float:
    return ticks / TICKS_PER_S


def fire(env: simpy.Environment, event: Event, priority: int) -> Event:
    """Trigger ``event`` now at ``priority`` (SimPy's ``succeed`` always schedules at NORMAL; at :data:`LATE` the
    event fires after every normal-priority event of this instant)."""
    event._ok, event._value = True, None
    env.schedule(event, priority)
    return event
