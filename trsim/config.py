"""A simulation's configuration: per-model latency and batching policy, routing source, workload, engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from numbers import Integral

from trcore import BatchingPolicy, ConfigError, InfeasibleError
from trcore.routers import validate_keep_matrix, validate_matrix
from trsim.adaptive import AdaptiveSimConfig
from trsim.clock import MAX_SPAN_S
from trsim.kv import KVSimConfig
from trsim.latency import LatencyModel, QuantizedModel
from trsim.phases import Phase
from trsim.routing import RouterConfig
from trsim.signals import SignalConfig
from trsim.workload import WorkloadConfig


@dataclass(frozen=True)
class PerTokenConfig:
    """Costs of per-token standard serving (the baseline where every token is a new request):

    * ``client_rtt_s``: the client round trip between a token and its re-submission (a model's requests are
      back ``client_rtt_s`` after its step; hand-offs take that long too);
    * ``readmit_s``: engine time to admit one request (scheduling, allocation), per request per step;
    * ``prefix_match_s_per_block``: engine time to hash and match one cached KV block of the context;
    * ``block_size``: KV block size (vLLM's CPU backend: 32); the tokens after the last full cached block are
      recomputed;
    * ``recompute_s_per_token``: what recomputing one such token costs (one figure, or one per model). None: the
      latency model's own extend term prices it, and a latency model without one (constant, table, linear) is
      refused rather than letting the recompute cost nothing.
    """

    client_rtt_s: float = 1e-3
    readmit_s: float = 1e-4
    prefix_match_s_per_block: float = 5e-7
    block_size: int = 32
    recompute_s_per_token: float | tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        recompute = self.recompute_s_per_token
        per_model = recompute if isinstance(recompute, tuple) else (recompute or 0.0,)
        costs = (self.client_rtt_s, self.readmit_s, self.prefix_match_s_per_block, *per_model)
        if min(costs) < 0 or self.block_size < 1:
            raise ConfigError("per_token", "costs must be >= 0 and block_size >= 1")

    def recompute_cost(self, model: int) -> float | None:
        """Model ``model``'s cost per recomputed token (None: priced by its latency model)."""
        cost = self.recompute_s_per_token
        if isinstance(cost, tuple):
            if model >= len(cost):
                raise ConfigError("per_token.recompute_s_per_token", f"gives {len(cost)} costs, model {model} has none")
            return cost[model]
        return cost


@dataclass(frozen=True)
class SimConfig:
    """Everything one run needs. ``latency[m]`` and ``policies[m]`` describe model ``m`` (small to large by
    convention); requests enter at ``entry_model``. ``per_token`` set means this run *is* per-token serving;
    ``per_token_costs`` are the costs the ``per-token`` baseline will use (a scenario's ``per_token`` block),
    without changing any other run.

    The serving stack's own costs (0 by default: an ideal stack):

    * ``transfer_delay_s``: every hand-off message reaches its model this long after the step that made it
      ended, and a new request the entry model this long after its submission (the front end's message takes
      the same way); one figure for all, or one per receiving model;
    * ``host_overhead_s``: per model, the time its subserver loop spends between the end of a step and the next
      launch (reports, hand-offs, scheduling): the model is busy for its step latency plus this after every
      step; the step's tokens and hand-offs come out when the latency has passed. Empty: none;
    * ``host_overhead_per_request_s``: per model, more of that time per request in the step;
    * ``delivery_delay_s``: from a step's end to the client's receipt of its tokens (latencies only)."""

    latency: tuple[LatencyModel, ...]
    policies: tuple[BatchingPolicy, ...]
    router: RouterConfig = field(default_factory=RouterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    signals: SignalConfig = field(default_factory=SignalConfig)
    transfer_delay_s: float | tuple[float, ...] = 0.0
    host_overhead_s: tuple[float, ...] = ()
    entry_model: int = 0
    seed: int = 0
    per_token: PerTokenConfig | None = None
    per_token_costs: PerTokenConfig | None = None
    model_names: tuple[str, ...] = ()
    #: Copies of each model, each its own subserver (empty: one of each); requests are pinned as the server does.
    replicas: tuple[int, ...] = ()
    #: KV caches and the spill policy (``trsim.kv``); None: memory is free, as before KV accounting existed.
    kv: KVSimConfig | None = None
    #: A time-varying run (``trsim.phases``): the run ends when the last phase does.
    phases: tuple[Phase, ...] = ()
    #: Thresholds tuned online by ``trcore.adaptive`` (None: the policies' thresholds stay).
    adaptive: AdaptiveSimConfig | None = None
    #: Per model: host seconds per request of a step, added to ``host_overhead_s`` (empty: none).
    host_overhead_per_request_s: tuple[float, ...] = ()
    #: Seconds from the end of a step to the client's receipt of its tokens: recorded first-token and finish times
    #: move this much later (latency metrics only; a closed loop's next request follows ``think_time_s``).
    delivery_delay_s: float = 0.0
    #: Seconds a client sends each request after its arrival time (an open-loop client's timer and task wake-up):
    #: the request reaches the entry model this plus the transfer delay later; latencies count from the arrival.
    send_lag_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.latency or len(self.latency) != len(self.policies):
            raise ConfigError("models", "need one latency model and one batching policy per model (at least one)")
        if not 0 <= self.entry_model < self.num_models:
            raise ConfigError("entry_model", f"must be within 0..{self.num_models - 1}")
        _check_costs("transfer_delay_s", self.transfer_delay_s, self.num_models)
        if self.host_overhead_s:
            _check_costs("host_overhead_s", self.host_overhead_s, self.num_models)
        if self.host_overhead_per_request_s:
            _check_costs("host_overhead_per_request_s", self.host_overhead_per_request_s, self.num_models)
        _check_costs("delivery_delay_s", self.delivery_delay_s, self.num_models)
        _check_costs("send_lag_s", self.send_lag_s, self.num_models)
        if self.model_names and len(self.model_names) != self.num_models:
            raise ConfigError("model_names", "need one name per model")
        if self.replicas and (len(self.replicas) != self.num_models or min(self.replicas) < 1):
            raise ConfigError("replicas", f"need one count >= 1 per model ({self.num_models}), got {self.replicas}")
        if self.replicas and max(self.replicas) > 1 and self.per_token is not None:
            raise ConfigError("replicas", "the per-token baseline has no replicas")
        if self.kv is not None and len(self.kv.budgets) != self.num_models:
            raise ConfigError("kv", f"need one KV budget per model ({self.num_models}), got {len(self.kv.budgets)}")
        if self.adaptive is not None and any(p.table for p in self.policies):  # the controller would not see them
            raise ConfigError("models.table", "--thresholds adaptive tunes one vector for every active count and "
                              "replaces tables; leave them out, or run the tables without adaptive")  # fmt: skip
        for k, phase in enumerate(self.phases):
            _check_phase(f"phases[{k}]", phase, self.num_models)
            if phase.output_tokens is not None and self.workload.pairs is not None:  # pairs fix every length
                raise ConfigError(
                    f"phases[{k}].output_tokens", "the workload's length pairs (lengths_file) set every request's"
                )

    @property
    def num_models(self) -> int:
        return len(self.latency)

    def transfer_delay(self, model: int) -> float:
        """Seconds a hand-off to ``model`` travels."""
        delays = self.transfer_delay_s
        return delays[model] if isinstance(delays, tuple) else delays

    def host_overhead(self, model: int) -> float:
        """Seconds model ``model`` stays busy after each step, beyond its latency."""
        return self.host_overhead_s[model] if self.host_overhead_s else 0.0

    def host_overhead_per_request(self, model: int) -> float:
        """Seconds model ``model`` stays busy after each step per request in it, beyond :meth:`host_overhead`."""
        return self.host_overhead_per_request_s[model] if self.host_overhead_per_request_s else 0.0

    @property
    def names(self) -> tuple[str, ...]:
        return self.model_names or tuple(f"model{m}" for m in range(self.num_models))

    @property
    def thresholds(self) -> tuple[int, ...]:
        return tuple(p.threshold for p in self.policies)

    def with_thresholds(self, thresholds: Sequence[int]) -> SimConfig:
        vector = checked_thresholds(thresholds, self.num_models)
        policies = tuple(replace(p, threshold=b) for p, b in zip(self.policies, vector, strict=True))
        return replace(self, policies=policies)

    def with_concurrency(self, concurrency: int) -> SimConfig:
        return replace(self, workload=replace(self.workload, concurrency=concurrency))

    def with_quantum(self, quantum_s: float) -> SimConfig:
        """Round every step latency to whole quanta, as the throughput model does."""
        return replace(self, latency=tuple(QuantizedModel(m, quantum_s) for m in self.latency))

    def check_feasible(self) -> None:
        """Closed loop without max wait: thresholds in force at N active requests must satisfy
        sum(B_i - 1) < N, else requests can deadlock."""
        wl = self.workload
        if wl.arrival != "closed" or any(p.max_wait_s is not None for p in self.policies):
            return
        n = wl.concurrency
        # the configured vector, before the run-time peer-slack clamp that would hide the mistake
        effective = [replace(p, peer_slack=0).threshold_for(n) for p in self.policies]
        slack = sum(b - 1 for b in effective)
        if slack >= n:
            raise InfeasibleError(
                "thresholds",
                f"{list(self.thresholds)} at concurrency {n}: sum of (B_i - 1) = {slack} must be < {n}, "
                "else requests can deadlock (lower a threshold or set max_wait_ms)",
            )


def checked_thresholds(thresholds: Sequence[int], num_models: int) -> tuple[int, ...]:
    """``thresholds`` as ints, one whole number per model (a fraction was truncated unsaid: 1.5 ran as 1)."""
    if len(thresholds) != num_models:
        raise ConfigError("thresholds", f"need {num_models} values (one per model), got {len(thresholds)}")
    if any(isinstance(b, bool) or not isinstance(b, Integral) for b in thresholds):
        raise ConfigError("thresholds", f"must be whole numbers, got {list(thresholds)}")
    return tuple(int(b) for b in thresholds)


def _check_costs(name: str, given: float | tuple[float, ...], num_models: int) -> None:
    """``given``: one figure, or a tuple of one per model; each finite and >= 0."""
    values = given if isinstance(given, tuple) else (given,)
    if isinstance(given, tuple) and len(given) != num_models:
        raise ConfigError(name, f"need one value per model ({num_models}), got {list(given)}")
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ConfigError(name, f"must be finite and >= 0, got {given}")


def _check_phase(where: str, phase: Phase, num_models: int) -> None:
    """A phase's values, checked before the run reaches it (a bad one would fail mid-run, or be ignored)."""
    if not (math.isfinite(phase.duration_s) and 0 < phase.duration_s <= MAX_SPAN_S):
        raise ConfigError(f"{where}.duration_s", f"must be > 0 and at most {MAX_SPAN_S:g} s, got {phase.duration_s}")
    if phase.P is not None:
        validate_matrix(f"{where}.router.P", phase.P, num_models, stochastic=True)
    if phase.C is not None:
        validate_keep_matrix(phase.C, num_models, f"{where}.router.C")
    if phase.concurrency is not None and phase.concurrency < 1:
        raise ConfigError(f"{where}.concurrency", f"must be >= 1, got {phase.concurrency}")
    if phase.thresholds is not None and (len(phase.thresholds) != num_models or min(phase.thresholds) < 1):
        raise ConfigError(f"{where}.thresholds", f"need {num_models} values >= 1, got {list(phase.thresholds)}")
