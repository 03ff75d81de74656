"""The simulator driver's side of changing thresholds during a run, mixed into :class:`trsim.driver.Simulation`:
a new vector reaches every subserver's policy (the adaptive controller's switches, an oracle's phase vectors) and
takes effect at each model's next launch, a step boundary; nothing in flight is restarted or re-routed. Also the
active count the threshold tables key on, kept on every subserver (or per replica, the requests pinned to it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trcore.adaptive import policy_for_vector
from trcore.policy import table_entry

if TYPE_CHECKING:
    from trcore import Subserver
    from trcore.replicas import ReplicaTable
    from trsim.config import SimConfig


class ThresholdDriving:
    """Threshold changes on the simulation's subservers."""

    config: SimConfig
    subservers: list[Subserver]
    table: ReplicaTable
    num_active: int
    adaptive: Any
    pinned: list[int]
    _pins: dict[str, tuple[int, ...]]

    def _wake_model(self, m: int) -> None:
        raise NotImplementedError

    def now_s(self) -> float:
        raise NotImplementedError

    def _set_active(self, count: int, request_id: str) -> None:
        """``count`` requests are active; ``request_id`` is the one that arrived or finished. A subserver's count
        is the system's, or with replicas the requests pinned to it."""
        lowered = count < self.num_active
        self.num_active = count
        if self.adaptive is not None:
            self.adaptive.set_active(count / self.table.pipelines, self.now_s())  # one pipeline's share
        pins = self._pins.get(request_id)
        if pins is None:
            for p, sub in enumerate(self.subservers):
                sub.num_active = count
                if lowered and sub.num_ready:  # a smaller system may lower the threshold in force
                    self._wake_model(p)
            return
        step = -1 if lowered else 1
        for model, replica in enumerate(pins):
            p = self.table.proc(model, replica)
            self.pinned[p] += step
            sub = self.subservers[p]
            sub.num_active = self.pinned[p]
            if lowered and sub.num_ready:
                self._wake_model(p)

    def apply_thresholds(self, thresholds: tuple[int, ...]) -> None:
        """A new threshold vector on every subserver (tables dropped), each policy knowing its peers' slack so
        the vector stays deadlock-free as requests finish; an idle model with a queue decides again now."""
        for p, sub in enumerate(self.subservers):
            sub.policy = policy_for_vector(sub.policy, thresholds, sub.model)
            if sub.num_ready:
                self._wake_model(p)

    def thresholds_in_force(self) -> tuple[int, ...]:
        """Per model, the threshold its (first replica's) policy holds now: its table's entry at the active count
        it keys on, else its threshold."""
        procs = reversed(list(enumerate(self.table.procs)))
        first = {m: _in_force(self.subservers[p]) for p, (m, _) in procs}
        return tuple(first[m] for m in range(self.config.num_models))

    def thresholds_applied(self) -> tuple[int, ...]:
        """Per model, the threshold its (first replica's) policy applies now: the one in force, capped by the active
        count it keys on less its peers' slack and by its max batch (B = (1, 12) with 8 requests runs as (1, 8));
        with none active (a finite workload done), by its max batch only."""
        procs = reversed(list(enumerate(self.table.procs)))
        first = {m: _applied(self.subservers[p]) for p, (m, _) in procs}
        return tuple(first[m] for m in range(self.config.num_models))


def _in_force(sub: Subserver) -> int:
    policy = sub.policy
    if not policy.table or sub.num_active is None:
        return policy.threshold
    return table_entry(policy.table, sub.num_active, policy.threshold)


def _applied(sub: Subserver) -> int:
    return sub.policy.threshold_for(sub.num_active or None)
