"""Roofline step latency from a model's shape and a device's datasheet: the ``roofline`` latency model.

One step of a batch reads the weights once and each request's KV cache, and multiplies every fed token through
every layer. Its time is, per GPU of a tensor-parallel group::

    max(linear FLOPs / (peak * flops_eff), weight bytes / (bandwidth * bandwidth_eff))      # projections, MLP, head
  + max(attention FLOPs / (peak * flops_eff), KV bytes / (bandwidth * bandwidth_eff)) / attention_eff  # attention
  + 2 * layers * all-reduce(tokens * hidden)                                                # tensor parallelism
  + step_overhead + layers * layer_overhead + batch * request_overhead                      # launches, sampling

The efficiencies and overheads are :class:`RooflineParams`; their defaults are physically motivated, not fitted,
and :func:`trsim.roofline_fit.fit_roofline` refits them to measured profiles. Approximations: extend tokens of
a batch attend to the batch's mean context; activations are not counted as memory traffic; the LM head runs on
one token per request (prefill computes logits of the last position only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from trcore import ConfigError
from trsim.hardware import Hardware, dtype_bytes, load_hardware
from trsim.latency import LatencyModel, register_latency_model
from trsim.shapes import load_shape


@dataclass(frozen=True)
class RooflineParams:
    """Efficiencies (fractions of the datasheet peak reached) and fixed costs (seconds) of one step.

    Defaults: dense bf16 GEMMs reach about 70% of Tensor Core peak, weight/KV streaming about 85% of HBM
    bandwidth, NCCL rings about 80% of link bandwidth; attention kernels over a paged KV cache reach a further
    60% of either roof (``attention_efficiency``: scattered blocks, small per-head tiles); an eager step
    launches ~16 kernels per layer at ~5 us each (``layer_overhead_s``), spends ~1 ms in scheduling, input
    preparation and sampling (``step_overhead_s``), ~10 us more per request, and a small all-reduce costs ~15 us
    of latency.
    """

    flops_efficiency: float = 0.7
    bandwidth_efficiency: float = 0.85
    link_efficiency: float = 0.8
    attention_efficiency: float = 0.6
    step_overhead_s: float = 1e-3
    layer_overhead_s: float = 80e-6
    request_overhead_s: float = 10e-6
    allreduce_latency_s: float = 15e-6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("efficiency") and not 0 < value <= 1:
                raise ConfigError(f"roofline.{f.name}", f"must be in (0, 1], got {value}")
            if f.name.endswith("_s") and not value >= 0:
                raise ConfigError(f"roofline.{f.name}", f"must be >= 0, got {value}")


PARAM_NAMES = tuple(f.name for f in fields(RooflineParams))


@dataclass(frozen=True)
class ShapeCounts:
    """What the roofline needs of a decoder config: matmul parameters per layer and of the LM head, widths."""

    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ShapeCounts:
        """Counts of an HF ``config.json`` of a dense decoder (Qwen2/Qwen3/Llama style)."""
        try:
            heads = int(config["num_attention_heads"])
            return cls(
                num_layers=int(config["num_hidden_layers"]),
                hidden=int(config["hidden_size"]),
                num_heads=heads,
                num_kv_heads=int(config.get("num_key_value_heads", heads)),
                head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
                intermediate=int(config["intermediate_size"]),
                vocab=int(config["vocab_size"]),
            )
        except KeyError as exc:
            raise ConfigError("shape", f"config lacks {exc.args[0]!r} (needs an HF decoder config.json)") from None

    def splits_over(self, tp: int) -> bool:
        """Whether ``tp`` GPUs split the attention heads evenly and the KV heads evenly or into whole copies, as
        vLLM requires of a tensor-parallel degree."""
        kv = self.num_kv_heads % tp == 0 if tp <= self.num_kv_heads else tp % self.num_kv_heads == 0
        return self.num_heads % tp == 0 and kv

    @property
    def layer_params(self) -> int:
        """Matmul weights of one layer: q, k, v, o projections and the SwiGLU MLP (norms and biases left out)."""
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return 2 * self.hidden * q + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden


@dataclass(frozen=True)
class StepCost:
    """One step's work per GPU and the time each part takes (seconds)."""

    flops: float
    bytes: float
    linear_s: float
    attention_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def step_s(self) -> float:
        return self.linear_s + self.attention_s + self.comm_s + self.overhead_s

    @property
    def bound(self) -> str:
        """``memory`` or ``compute``: the roof the step's kernels are closest to."""
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def is_overhead_dominated(self) -> bool:
        """Fixed costs and all-reduces take longer than the kernels themselves (small models, small batches)."""
        return self.overhead_s + self.comm_s > self.linear_s + self.attention_s


@register_latency_model("roofline")
class RooflineModel(LatencyModel):
    """Step latency of shape ``shape`` (a name under ``models/shapes`` or a config dict) on ``tp`` devices
    ``hardware`` (a name in the hardware table) in ``dtype``; further keyword arguments set :class:`RooflineParams`.
    """

    coefficient_names = ("hardware", "shape", "tp", "dtype", *PARAM_NAMES)
    prices_extend = True

    def __init__(
        self, hardware: str, shape: str | dict[str, Any], tp: int = 1, dtype: str = "bf16", **params: float
    ) -> None:
        self.device: Hardware = load_hardware(hardware)
        self.shape = shape
        self.counts = ShapeCounts.from_config(load_shape(shape) if isinstance(shape, str) else shape)
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ConfigError("tp", f"must be an integer >= 1, got {tp!r}")
        if tp > 1 and self.device.link_bw <= 0:
            raise ConfigError("tp", f"{self.device.name} has no GPU-to-GPU link; tp must be 1")
        self.tp, self.dtype = tp, dtype
        self.elt = dtype_bytes(dtype)
        self.peak = self.device.peak_flops(dtype)
        self.params = RooflineParams(**params)

    def check_tp(self, option: str) -> None:
        """Refuse (naming ``option``) a tensor-parallel degree that does not split the heads (vLLM would not start)."""
        c = self.counts
        if not c.splits_over(self.tp):
            raise ConfigError(option, f"{self.shape}: tp {self.tp} does not split its {c.num_heads} attention heads "
                              f"and {c.num_kv_heads} KV heads (vLLM needs a divisor)")  # fmt: skip

    def with_params(self, params: RooflineParams) -> RooflineModel:
        """The same shape and device with other efficiencies and overheads."""
        return RooflineModel(self.device.name, self.shape, self.tp, self.dtype, **asdict(params))

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.cost(batch_size, context_tokens, extend_tokens).step_s

    def weight_bytes(self) -> float:
        """Weight bytes each GPU holds (embeddings included) and reads per step (embeddings excluded: rows only)."""
        c = self.counts
        return (c.num_layers * c.layer_params + 2 * c.head_params) * self.elt / self.tp

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per context token on each GPU (KV heads are replicated when tp exceeds them)."""
        c = self.counts
        return 2 * c.num_layers * math.ceil(c.num_kv_heads / self.tp) * c.head_dim * self.elt

    def cost(self, batch_size: int, context_tokens: int, extend_tokens: int) -> StepCost:
        """The step's FLOPs, bytes and times per GPU (``context_tokens``: sum over the batch of tokens already
        in the KV cache; ``extend_tokens``: tokens fed beyond one per request)."""
        c, p, tp = self.counts, self.params, self.tp
        fed = batch_size + extend_tokens
        lin_flops = 2 * (fed * c.num_layers * c.layer_params + batch_size * c.head_params) / tp
        lin_bytes = (c.num_layers * c.layer_params + c.head_params) * self.elt / tp
        mean_ctx = context_tokens / max(batch_size, 1)
        attended = context_tokens + extend_tokens * (mean_ctx + extend_tokens / (2 * max(batch_size, 1)))
        att_flops = 4 * c.num_layers * c.num_heads * c.head_dim * attended / tp
        att_bytes = self.kv_bytes_per_token() * (context_tokens + fed)
        flops_rate, byte_rate = self.peak * p.flops_efficiency, self.device.memory_bw * p.bandwidth_efficiency
        lin = (lin_flops / flops_rate, lin_bytes / byte_rate)
        att_rates = (flops_rate * p.attention_efficiency, byte_rate * p.attention_efficiency)
        att = (att_flops / att_rates[0], att_bytes / att_rates[1])
        return StepCost(
            flops=lin_flops + att_flops,
            bytes=lin_bytes + att_bytes,
            linear_s=max(lin),
            attention_s=max(att),
            compute_s=lin[0] + att[0],
            memory_s=lin[1] + att[1],
            comm_s=self._comm_s(fed),
            overhead_s=p.step_overhead_s + c.num_layers * p.layer_overhead_s + batch_size * p.request_overhead_s,
        )

    def physical_bound_s(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        """The datasheet floor: bytes moved / peak bandwidth and FLOPs / peak FLOP/s, whichever is larger."""
        cost = self.cost(batch_size, context_tokens, extend_tokens)
        return max(cost.bytes / self.device.memory_bw, cost.flops / self.peak)

    def _comm_s(self, tokens: int) -> float:
        """Two ring all-reduces per layer (after attention and after the MLP) of ``tokens`` hidden vectors."""
        if self.tp == 1:
            return 0.0
        p = self.params
        message = tokens * self.counts.hidden * self.elt
        ring = 2 * (self.tp - 1) / self.tp * message / (self.device.link_bw * p.link_efficiency)
        return 2 * self.counts.num_layers * (ring + p.allreduce_latency_s)

    def coefficients(self) -> dict[str, Any]:
        return {"hardware": self.device.name, "shape": self.shape, "tp": self.tp, "dtype": self.dtype,
                **asdict(self.params)}  # fmt: skip

    def __repr__(self) -> str:
        shape = self.shape if isinstance(self.shape, str) else "<config>"
        return f"RooflineModel({self.device.name}, {shape}, tp={self.tp}, {self.dtype})"


def parse_roofline_spec(text: str, **params: float) -> RooflineModel:
    """A roofline from ``roofline:<hardware>:<shape>[:tp<k>][:<dtype>]``
    (e.g. ``roofline:a100-80g:DeepSeek-R1-Distill-Qwen-32B:tp2``; dtype defaults to bf16)."""
    parts = text.strip().split(":")
    if len(parts) < 3 or parts[0] != "roofline" or len(parts) > 5:
        raise ConfigError("latency", f"expected roofline:<hardware>:<shape>[:tp<k>][:<dtype>], got {text!r}")
    tp, dtype = 1, "bf16"
    for extra in parts[3:]:
        if extra.startswith("tp") and extra[2:].isdecimal():
            tp = int(extra[2:])
        else:
            dtype_bytes(extra)  # validates, listing the valid dtypes
            dtype = extra
    model = RooflineModel(parts[1], parts[2], tp=tp, dtype=dtype, **params)
    model.check_tp("tp")  # as `tokenrouter latency --tp` and `plan` refuse it: vLLM would not start
    return model


def max_batch_tokens(model: RooflineModel, memory_fraction: float = 0.9) -> int:
    """KV-cache tokens that fit on each GPU beside the weights, using ``memory_fraction`` of its memory."""
    free = model.device.memory_bytes * memory_fraction - model.weight_bytes()
    return max(int(free // model.kv_bytes_per_token()), 0)


def with_params(model: RooflineModel, **changes: float) -> RooflineModel:
    """``model`` with some :class:`RooflineParams` replaced."""
    return model.with_params(replace(model.params, **changes))
