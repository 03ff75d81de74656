"""How long a request stays on a model and how long a parked session stays away: the two per-step move rates the
``cost`` spill policy prices with, given (the routing statistics' P) or learned from the model's own traffic.

Seen from one model ``m``:

* the **leave rate** is the chance a request stepping on ``m`` moves elsewhere after the step (``1 - P[m][m]``),
  so it stays ``1 / rate`` steps;
* the **return rate** from ``l`` is the chance per step that a request now on ``l`` comes back to ``m``
  (``P[l][m]``), so a session parked on ``m`` stays away ``1 / rate`` steps.

Routing programs that are not a Markov chain (trained routers, per-request schedules) give no P, so
:class:`LearnedMoveRates` counts them: request-steps and departures on ``m``; returns and the steps each session
was away (the tokens written elsewhere meanwhile, at least 1), a session whose request ended elsewhere counting its
steps without a return. Counts decay (``decay`` per observation) so the rates follow drifting traffic. Before any
observation both rates are 1 (a request leaves after one step and comes straight back): the cautious guess,
under which displacing a parked session never pays.
"""

from __future__ import annotations

from collections.abc import Sequence


class MoveRates:
    """The routing statistics' P, read as the two rates (module docstring)."""

    def __init__(self, P: Sequence[Sequence[float]]) -> None:
        from trcore.routers import validate_matrix  # here: trcore.routers imports the core that imports this

        validate_matrix("memory.routing", P, len(P), stochastic=True)
        self.P = [list(map(float, row)) for row in P]

    def leave_rate(self, model: int) -> float:
        return 1.0 - self.P[model][model]

    def return_rate(self, location: int, model: int) -> float:
        return self.P[location][model]

    def stepped(self, num_steps: int) -> None:
        """``num_steps`` request-steps ran on the model (ignored: P is given)."""

    def left(self) -> None:
        """A request left the model after its step (ignored: P is given)."""

    def away(self, location: int, num_steps: int, returned: bool) -> None:
        """A parked session was away ``num_steps`` steps on ``location`` (ignored: P is given)."""


class LearnedMoveRates(MoveRates):
    """The two rates counted from traffic (module docstring); ``decay`` per observation, 1 for none."""

    def __init__(self, decay: float = 0.999) -> None:
        super().__init__([])
        self.decay = decay
        self.steps, self.departures = 1.0, 1.0
        self._away: dict[int, list[float]] = {}  # location -> [steps away, returns]

    def leave_rate(self, model: int) -> float:
        return min(1.0, self.departures / self.steps)

    def return_rate(self, location: int, model: int) -> float:
        steps, returns = self._away.get(location, (1.0, 1.0))
        return min(1.0, returns / steps)

    def stepped(self, num_steps: int) -> None:
        fade = self.decay**num_steps
        self.steps = self.steps * fade + num_steps
        self.departures *= fade

    def left(self) -> None:
        self.departures += 1.0

    def away(self, location: int, num_steps: int, returned: bool) -> None:
        counts = self._away.setdefault(location, [1.0, 1.0])
        counts[0] = counts[0] * self.decay + max(1, num_steps)
        counts[1] = counts[1] * self.decay + (1.0 if returned else 0.0)
