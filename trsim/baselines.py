"""Baselines modelled in the same simulator, as transformations of a TokenRouter configuration.

* ``tokenrouter``: the configuration as given (delayed batching with its thresholds);
* ``b1``: TokenRouter without delayed batching: every model launches as soon as one request is ready;
* ``lockstep``: the whole batch waits while routed requests visit the other models (the official R2R
  pattern): the entry model steps only when every active request is back on it;
* ``per-token``: per-token standard serving: every token is a new request to a single-model server, paying
  re-admission, prefix matching and recomputation of the last partial KV block on each token, plus a client
  round trip (``PerTokenConfig``);
* ``llm-only``: every token on the largest model (the last one), no routing, with that model's KV cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from trcore import Batch, BatchingPolicy, ConfigError
from trsim.config import PerTokenConfig, SimConfig
from trsim.latency import LatencyModel
from trsim.routing import RouterConfig


class PerTokenLatency(LatencyModel):
    """Step latency of a standard server fed one new request per token.

    Each request re-enters as a fresh prompt: the engine matches its cached prefix (``prefix_match_s_per_block``
    per full block), admits it (``readmit_s``) and recomputes the tokens after its last full cached block, on
    top of the tokens TokenRouter would feed anyway.
    """

    def __init__(self, inner: LatencyModel, model: int, costs: PerTokenConfig) -> None:
        if costs.recompute_cost(model) is None and not inner.prices_extend:
            raise ConfigError(
                "per_token.recompute_s_per_token",
                f"the {inner.name or type(inner).__name__} latency model has no extend term, so recomputed tokens "
                "would cost nothing: give their cost per token, or use an extend-aware model (quadratic, roofline)",
            )
        self.inner, self.model, self.costs = inner, model, costs

    def __call__(self, batch: Batch) -> float:
        block, m, rate = self.costs.block_size, self.model, self.costs.recompute_cost(self.model)
        recompute = sum(r.anchors[m] % block for r in batch.requests)
        blocks = sum(ctx // block for ctx in batch.context_lens)
        extend = sum(batch.num_new_tokens) - batch.size
        if rate is None:
            base = self.inner.predict(batch.size, sum(batch.context_lens), extend + recompute)
        else:
            base = self.inner.predict(batch.size, sum(batch.context_lens), extend) + rate * recompute
        return base + self.costs.readmit_s * batch.size + self.costs.prefix_match_s_per_block * blocks

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.inner.predict(batch_size, context_tokens, extend_tokens) + self.costs.readmit_s * batch_size

    def coefficients(self) -> dict[str, object]:
        return {"inner": self.inner.coefficients(), **vars(self.costs)}


def _plain(policy: BatchingPolicy, threshold: int) -> BatchingPolicy:
    return replace(policy, threshold=threshold, table=MappingProxyType({}), max_wait_s=None)


def tokenrouter(config: SimConfig) -> SimConfig:
    return config


def b1(config: SimConfig) -> SimConfig:
    return replace(config, policies=tuple(_plain(p, 1) for p in config.policies))


def lockstep(config: SimConfig) -> SimConfig:
    # A threshold of max_batch is capped at the number of active requests: "wait until all are back".
    policies = tuple(_plain(p, p.max_batch if m == config.entry_model else 1) for m, p in enumerate(config.policies))
    return replace(config, policies=policies)


def per_token(config: SimConfig) -> SimConfig:
    return replace(b1(config), per_token=config.per_token or config.per_token_costs or PerTokenConfig())


def llm_only(config: SimConfig) -> SimConfig:
    llm = config.num_models - 1
    return replace(
        config,
        latency=(config.latency[llm],),
        policies=(_plain(config.policies[llm], 1),),
        router=RouterConfig("markov", {"P": [[1.0]], "C": [[1.0]]}),
        workload=replace(config.workload, tag_traces=False),
        entry_model=0,
        per_token=None,
        model_names=(config.names[llm],),
        kv=replace(config.kv, budgets=(config.kv.budgets[llm],)) if config.kv is not None else None,
        phases=tuple(replace(p, P=None, C=None, thresholds=None) for p in config.phases),  # no routing to change
    )


BASELINES: dict[str, Callable[[SimConfig], SimConfig]] = {
    "tokenrouter": tokenrouter,
    "b1": b1,
    "lockstep": lockstep,
    "per-token": per_token,
    "llm-only": llm_only,
}


def apply_baseline(config: SimConfig, name: str) -> SimConfig:
    """``config`` turned into baseline ``name``; unknown names list the valid ones."""
    check_baseline(name)
    return BASELINES[name](config)


def check_baseline(name: str) -> None:
    """A ConfigError naming ``baseline`` unless ``name`` is one of :data:`BASELINES` (listed in it)."""
    if name not in BASELINES:
        raise ConfigError("baseline", f"unknown baseline {name!r}; valid: {', '.join(BASELINES)}")
