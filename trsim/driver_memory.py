"""The simulator driver's side of KV accounting (``SimConfig.kv``), mixed into :class:`trsim.driver.Simulation`:
building each subserver's :class:`~trcore.KVMemory`, failing the requests the core finds unservable, recording
blocks in use, and the ``kv`` section of the result. Evicted KV needs no freeing here (no engine holds it); its
recompute is already in the next batch's ``num_new_tokens``, which the latency model prices."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trcore import KVMemory, PeerReq, Subserver
from trcore.errors import ConfigError, InfeasibleError
from trsim.clock import TICKS_PER_S
from trsim.kv import KVRecorder, build_memory

if TYPE_CHECKING:
    import simpy

    from trcore.replicas import ReplicaTable
    from trsim.config import SimConfig


#: Failed requests, with not one token committed, after which a run stops as unservable.
MAX_FAILED_UNSERVED = 1000


class MemoryDriving:
    """Methods :class:`~trsim.driver.Simulation` uses when ``config.kv`` is set."""

    config: SimConfig
    env: simpy.Environment
    subservers: list[Subserver]
    table: ReplicaTable
    kv: KVRecorder | None
    _arrivals: dict[str, float]
    _pins: dict[str, tuple[int, ...]]
    committed: int

    def _stop(self) -> None:
        raise NotImplementedError

    def _memory_deadlock(self, ready: dict[int, int]) -> InfeasibleError | None:
        """At a deadlock: the error naming memory when a model held enough ready requests for its threshold
        (``ready``: per model) and KV is counted, so the blocks, not the thresholds, kept them waiting."""
        thresholds = list(self.config.thresholds)
        if self.kv is None or all(n < thresholds[m] for m, n in ready.items()):
            return None
        return InfeasibleError("memory", f"the simulation deadlocked: ready per model {ready}, every one waiting for "
                               "KV blocks that no policy frees")  # fmt: skip

    def _end(self, message: PeerReq, now: float) -> None:
        raise NotImplementedError

    def _memory(self, model: int) -> KVMemory:
        assert self.config.kv is not None
        return build_memory(self.config.kv, model, self.config.latency[model], self.config.router)

    def _settle_memory(self, sub: Subserver) -> int:
        """After a launch: fail what can never fit (freeing it on every model), record the blocks now in use; how
        many failed. When every request so far failed (:data:`MAX_FAILED_UNSERVED` of them, not a token
        committed) the run stops and :meth:`_check_servable` says why."""
        assert self.kv is not None
        now = self.env.now / TICKS_PER_S
        unservable = sub.take_unservable()
        for req in unservable:
            rid, n = req.spec.request_id, req.spec.num_prompt_tokens
            for other in self.subservers:
                other.abort(rid)
            self._arrivals.pop(rid)
            self.kv.num_failed += 1
            self._end(PeerReq(rid, n, tuple(req.token_ids[n:]), tuple(req.anchors), sub.model, is_finished=True), now)
            self._pins.pop(rid, None)
        self.kv.observe(self.env.now)
        if unservable and self._nothing_servable():
            self._stop()
        return len(unservable)

    def _nothing_servable(self) -> bool:
        return self.kv is not None and self.committed == 0 and self.kv.num_failed >= MAX_FAILED_UNSERVED

    def _check_servable(self) -> None:
        """A ConfigError when the run stopped because no request fit a whole KV cache (raised once the run has
        stopped, outside the SimPy process that saw it)."""
        if self._nothing_servable():
            assert self.kv is not None
            raise ConfigError(
                "kv",
                f"every request is larger than a whole KV cache ({self.kv.num_failed} failed, none wrote a token): "
                "give the models more KV cache or the requests shorter prompts and outputs",
            )

    def _kv_summary(self, end_tick: int) -> dict[str, Any]:
        assert self.kv is not None and self.config.kv is not None
        names, replicas = self.config.names, self.table.has_replicas
        labels = [{"model": names[m], **({"replica": r} if replicas else {})} for m, r in self.table.procs]
        return self.kv.summary(end_tick, self.config.kv.spill, labels)
