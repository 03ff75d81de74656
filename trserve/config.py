"""The serve configuration: pydantic models validated at the edge, loaded from YAML or the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, field_validator, model_validator

from trcore.adaptive_config import AdaptiveConfig
from trcore.adaptive_window import MAX_TICK_S, MAX_WINDOW_SPANS
from trcore.errors import ConfigError
from trcore.policy import check_tables
from trserve.model_config import ClusterConfig, ModelConfig, StrictSection, check_cluster, check_memory, check_models
from trserve.pairs.fill import apply_pair
from trsim.yaml_text import load_yaml, read_utf8

Mode = Literal["routed", "lockstep", "per-token"]
#: ``hash`` is a deterministic stand-in engine for tests of the serving machinery (see trserve.engine.hash);
#: ``emulated`` writes the same hash tokens, each step taking the time a latency model gives (trserve.engine.emulated).
Backend = Literal["vllm", "hash", "emulated"]

Handoff = Literal["session", "readmit"]
#: What a tool does with the drift probe's ratio of observed to profile step time (see trserve.server.drift).
DriftMode = Literal["scale", "stop", "report", "skip"]
DriftProbePlacement = Literal["auto", "alone", "serving"]


class RouterConfig(StrictSection):
    """The routing program (by registry name) and its parameters."""

    program: str = "rstitch"
    params: dict[str, Any] = Field(default_factory=dict)


class AutoThresholdsConfig(StrictSection):
    """Inputs of ``thresholds: auto``: the concurrency to optimise for, where the routing statistics (P, C) come
    from (a JSONL trace file; None = the routing program's own P/C parameters), and what the drift probe's
    ratios do to the profiles' latencies (``trserve.server.drift``)."""

    concurrency: int = Field(16, ge=1)
    routing_traces: str | None = None
    calibration_dir: str | None = None
    #: Delay batches only when the model predicts more than this gain over thresholds of 1 (its error is larger).
    min_gain: float = Field(0.03, ge=0.0, lt=1.0)
    #: The drift probe before the optimizer (docs/serving.md): scale the profiles by the engines' observed step
    #: times (default), stop beyond ``drift_tolerance``, only report, or skip the probe.
    drift: DriftMode = "scale"
    drift_tolerance: float = Field(0.05, gt=0.0, lt=1.0)
    #: Where the probe times the engines (``trserve.crossval.drift.PROBE_PLACEMENTS``): ``auto`` = under serving's
    #: own interference where the engines share the stack's CPUs (``backend: vllm`` on CPU), alone on GPUs.
    drift_probe: DriftProbePlacement = "auto"


#: ``batching.adaptive.tick_s``'s floor (its ceiling and the most spans its window holds: the core's, as the
#: simulator's).
MIN_TICK_S = 0.1


class AdaptiveThresholdsConfig(StrictSection):
    """Knobs of ``thresholds: adaptive`` (``trcore.adaptive.AdaptiveConfig``; docs/serving.md): the controller's
    sliding window, the predicted gain a switch needs, the time between switches and between solves; ``tick_s``
    between the front end's decisions; ``initial``: the vector in force until the first switch (default all 1);
    ``max_cpu_fraction`` and ``cpu_credit_s``: a solve starts only while the controller's CPU seconds are within
    that fraction of the time it has run, plus the credit (its cost bound in the long run)."""

    window_s: float = Field(10.0, gt=0)
    min_gain: float = Field(0.02, ge=0.0, lt=1.0)
    min_interval_s: float = Field(10.0, ge=0)
    min_steps: int = Field(200, ge=1)
    min_fill: float = Field(1.0, ge=0, le=1)
    tolerance: float = Field(0.02, ge=0)
    latency_tolerance: float = Field(0.05, ge=0)
    solve_interval_s: float = Field(5.0, ge=0)
    change_window_s: float | None = Field(None, ge=0)
    change_sigma: float = Field(4.0, gt=0)
    gain_sigma: float = Field(2.0, ge=0)
    method: Literal["auto", "sampled", "exact"] = "auto"
    max_candidates: int = Field(256, ge=1)
    tick_s: float = Field(1.0, gt=0)
    initial: list[int] | None = None
    max_cpu_fraction: float = Field(0.02, gt=0, le=1)
    cpu_credit_s: float = Field(5.0, ge=0)

    @model_validator(mode="after")
    def _within_the_cores_ranges(self) -> AdaptiveThresholdsConfig:
        """The checks across knobs the core makes (``change_window_s`` below ``window_s``), named in full, and
        ``tick_s``'s lower bound (each tick re-reads the window's spans: its cost grows like window_s / tick_s^2)."""
        try:
            AdaptiveConfig(**self.core_knobs())
        except ConfigError as exc:
            raise ConfigError(f"batching.{exc.field}", exc.problem) from None
        low = max(MIN_TICK_S, self.window_s / MAX_WINDOW_SPANS)
        if self.tick_s < low:
            raise ConfigError("batching.adaptive.tick_s", f"must be >= {low:g} s (at least {MIN_TICK_S} s and "
                              f"window_s / {MAX_WINDOW_SPANS}), got {self.tick_s:g}")  # fmt: skip
        if not self.tick_s <= MAX_TICK_S:  # a longer tick never decides (the simulator refuses it too)
            raise ConfigError("batching.adaptive.tick_s", f"must be <= {MAX_TICK_S:g} s, got {self.tick_s:g}")
        return self

    def core_knobs(self) -> dict[str, Any]:
        """The knobs of ``trcore.adaptive.AdaptiveConfig`` (the rest are the front end's)."""
        return self.model_dump(exclude={"tick_s", "initial", "max_cpu_fraction", "cpu_credit_s"})


class BatchingConfig(StrictSection):
    """Delayed batching per model: thresholds ``B_i`` (or ``auto``), optional tables keyed by the number of
    active requests, a maximum wait for a short queue, and the largest batch (default: the model's
    ``max_num_seqs``)."""

    thresholds: list[int] | Literal["auto", "adaptive"] | None = None
    #: Keys are active counts: JSON (a run's spec, ``--print-config``'s YAML) writes them as strings, read back.
    tables: list[dict[Annotated[int, Strict(False)], int]] | None = None
    max_wait_ms: float | None = Field(20.0, ge=0)
    max_batch: int | None = Field(None, ge=1)
    auto: AutoThresholdsConfig = AutoThresholdsConfig()
    adaptive: AdaptiveThresholdsConfig = AdaptiveThresholdsConfig()


class MemoryConfig(StrictSection):
    """KV memory in the core (``memory:``): ``policy`` picks what a model gives up when a step needs blocks
    (``trcore.spill``): ``cost`` (default) spills the parked sessions worth least per block and lets a new request
    in by spilling only when that costs less than it saves, else it waits at admission; ``lru`` spills the oldest
    parked session; ``admission-limit`` never spills and admits a request on a model only once its worst case
    (prompt + max_tokens) is reserved there; ``off`` keeps no accounting (the engine fails a step that does not
    fit, as before)."""

    policy: Literal["cost", "lru", "admission-limit", "off"] = "cost"

    @field_validator("policy", mode="before")
    @classmethod
    def _bare_off(cls, value: object) -> object:
        """YAML reads a bare ``policy: off`` (the documented spelling) as false: that is the ``off`` policy."""
        return "off" if value is False else value


class RestartConfig(StrictSection):
    """What happens when a subserver process dies: restart it (up to ``max_restarts`` times; its requests resume
    once it is back), or stay down (its requests fail with 503)."""

    enabled: bool = True
    max_restarts: int = Field(3, ge=0)


class ServerConfig(StrictSection):
    """The HTTP front end and process management."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    served_model_name: str = "tokenrouter"
    api_key: str | None = None
    api_key_env: str = "TOKENROUTER_API_KEY"
    #: Requests in flight at once; left out of a serve config: the smallest of the models' ``max_num_seqs`` times
    #: their ``replicas`` (every active request may be resident on one replica of every model), 64 by default.
    max_active_requests: int = Field(64, ge=1)
    #: Requests waiting beyond ``max_active_requests`` before new ones get 429 (``Retry-After``); ``None`` (the
    #: default): no bound, every request queues, as vLLM's own server does.
    max_waiting_requests: int | None = Field(None, ge=0)
    #: Admit by KV headroom: while the entry model's core keeps a new request waiting for memory (its spill policy
    #: found no room worth making), further requests wait in the front end's queue, not on the model
    #: (:mod:`trserve.frontend.kv_gate`). Routed mode with KV accounting only. Off by default: on and off side
    #: by side it gained in one emulated cell and lost in another (docs/benchmarks.md).
    kv_admission: bool = False
    max_body_bytes: int = Field(1_000_000, ge=1024)
    #: Output tokens per stream chunk (as vLLM's ``--stream-interval``): 1 sends each token as it comes; n > 1
    #: holds text until n tokens since the last chunk (the first chunk and the last are never held).
    stream_interval: int = Field(1, ge=1)
    startup_timeout_s: float = Field(600.0, gt=0)
    #: Fail (HTTP 504) a dispatched request that no step moved for this long while every model is up; None: never.
    stall_timeout_s: float | None = Field(120.0, gt=0)
    restart: RestartConfig = RestartConfig()
    log_dir: str | None = None
    #: How the front end and worker processes talk: ``unix`` sockets in the private run directory (one machine,
    #: no ZeroMQ: each message wakes only its receiver), ``ipc`` (ZeroMQ) sockets there, or ``tcp`` sockets on
    #: random ports of ``bind_host``, authenticated and encrypted with per-run CURVE keys.
    transport: Literal["ipc", "tcp", "unix"] = "unix"
    bind_host: str = "127.0.0.1"


class ServeConfig(StrictSection):
    """Everything ``tokenrouter serve`` needs. Model ``i`` in ``models`` is model index ``i`` of the routing
    program; requests enter at ``entry_model``. ``pair`` names the model pair (``models/<pair>/``) the models are:
    it fills in what the config leaves out (:mod:`trserve.pairs.fill`) and its artifacts are checked against the
    models at start-up (:mod:`trserve.pairs.check`; ``allow_other_pair`` turns a mismatch into a warning)."""

    pair: str | None = None
    allow_other_pair: bool = False
    mode: Mode = "routed"
    backend: Backend = "vllm"
    handoff: Handoff = "session"
    models: list[ModelConfig] = Field(min_length=1)
    entry_model: int = Field(0, ge=0)
    router: RouterConfig = RouterConfig()
    batching: BatchingConfig = BatchingConfig()
    server: ServerConfig = ServerConfig()
    memory: MemoryConfig = MemoryConfig()
    #: The engines' seed: vLLM seeds numpy's global generator with it, which takes 0..2**32-1 only.
    seed: int = Field(0, ge=0, le=2**32 - 1)
    top_logprobs: int = Field(20, ge=0)
    #: None: every process on this machine (Ray is never imported); else the Ray cluster that hosts the workers.
    cluster: ClusterConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_from_pair(cls, data: Any) -> Any:
        return apply_pair(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _cross_fields(self) -> ServeConfig:
        n = len(self.models)
        names = [m.name for m in self.models]
        if len(set(names)) != n:
            raise ValueError(f"model names must be unique, got {names}")
        if self.entry_model >= n:
            raise ValueError(f"entry_model {self.entry_model} must index one of the {n} models")
        thresholds = self.batching.thresholds
        if isinstance(thresholds, list) and len(thresholds) != n:
            raise ValueError(f"batching.thresholds needs one entry per model ({n}), got {len(thresholds)}")
        if self.batching.tables is not None:
            caps = [min(self.batching.max_batch or m.max_num_seqs, m.max_num_seqs) for m in self.models]
            base = thresholds if isinstance(thresholds, list) else [1] * n
            check_tables(base, self.batching.tables, "batching.tables", caps)
        if self.mode != "routed" and (self.batching.tables is not None or thresholds not in (None, [1] * n)):
            given = "batching.tables" if self.batching.tables is not None else f"batching.thresholds {thresholds!r}"
            raise ValueError(f"{given}: mode {self.mode!r} has no delayed batching, so it would do nothing")
        check_models(self.mode, self.backend, self.models)
        if self.handoff == "readmit" and self.backend != "vllm":  # the stand-in engines keep every session
            raise ConfigError("handoff", f"readmit re-adds requests to vLLM with prefix caching; backend "
                              f"{self.backend!r} keeps sessions, so it would do nothing: use session")  # fmt: skip
        if self.cluster is not None:
            check_cluster(self.cluster, self.mode, self.models)
        check_memory(self.mode, self.backend, self.models, self.server.kv_admission, self.memory.policy)
        if self.batching.adaptive != AdaptiveThresholdsConfig() and thresholds != "adaptive":  # it would do nothing
            raise ConfigError("batching.adaptive", f"tunes thresholds: adaptive; thresholds is {thresholds!r}")
        fewest, active = min(m.max_num_seqs * m.replicas for m in self.models), self.server.max_active_requests
        if "max_active_requests" not in self.server.model_fields_set:  # not given: as many as every model holds
            server = self.server.model_copy(update={"max_active_requests": fewest})
            object.__setattr__(self, "server", server)  # a frozen section, filled once here
            active = fewest
        if self.mode != "per-token" and active > fewest:
            raise ValueError(f"server.max_active_requests ({active}) must not exceed the models' max_num_seqs "
                             f"x replicas ({fewest}): every active request may be resident on (a replica of) every "
                             f"model")  # fmt: skip
        return self

    @property
    def num_models(self) -> int:
        return len(self.models)

    @property
    def replicas(self) -> tuple[int, ...]:
        """Copies of each model (one subserver process each)."""
        return tuple(m.replicas for m in self.models)

    @property
    def max_model_len(self) -> int:
        """The context limit a request must fit on every model it may visit."""
        return min(m.max_model_len for m in self.models)


def load_config(path: str | Path, pair: str | None = None) -> ServeConfig:
    """Read and validate a YAML serve config (pydantic errors name the field); ``pair`` replaces its ``pair:``."""
    import yaml

    try:
        data = load_yaml(read_utf8(path, "config"))
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a mapping of settings")
    if pair is not None:
        data["pair"] = pair
    return ServeConfig.model_validate(data)


def dump_config(cfg: ServeConfig) -> str:
    """The config as YAML (what ``serve --print-config`` shows and runs record)."""
    import yaml

    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
