"""The simulator driver's side of changing thresholds during a run, mixed into :class:`trsim.driver.Simulation`:
a new vector reaches every subserver's policy (the adaptive controller's switches, an oracle's phase vectors) and
takes effect at each model's next launch, a step boundary; nothing in flight is restarted or re-routed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trcore.adaptive import policy_for_vector

if TYPE_CHECKING:
    from trcore import Subserver
    from trcore.replicas import ReplicaTable
    from trsim.config import SimConfig


class ThresholdDriving:
    """Threshold changes on the simulation's subservers."""

    config: SimConfig
    subservers: list[Subserver]
    table: ReplicaTable

    def _wake_model(self, m: int) -> None:
        raise NotImplementedError

    def apply_thresholds(self, thresholds: tuple[int, ...]) -> None:
        """A new threshold vector on every subserver (tables dropped), each policy knowing its peers' slack so
        the vector stays deadlock-free as requests finish; an idle model with a queue decides again now."""
        for p, sub in enumerate(self.subservers):
            sub.policy = policy_for_vector(sub.policy, thresholds, sub.model)
            if sub.num_ready:
                self._wake_model(p)

    def thresholds_in_force(self) -> tuple[int, ...]:
        """Per model, the threshold its (first replica's) policy holds now."""
        first = {m: self.subservers[p].policy.threshold for p, (m, _) in reversed(list(enumerate(self.table.procs)))}
        return tuple(first[m] for m in range(self.config.num_models))
