"""Step-latency models, registered by name: what one step of a batch costs in simulated seconds.

Every model predicts from three features of a ``trcore.Batch``: the batch size, the context tokens (sum of
``context_lens``) and the extend tokens (tokens fed beyond one per request: prompts and hand-off appends), so
prefill work costs time wherever the model has a term for it. Models are built from coefficients
(:func:`make_latency_model`) or fitted to measured samples (:func:`fit_latency_model`, in ``trsim.fit``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from trcore import Batch, ConfigError


class LatencyModel:
    """Base class: ``model(batch)`` is the step latency in seconds; subclasses implement :meth:`predict`."""

    name: ClassVar[str] = ""
    #: Coefficient names, in the order :meth:`features` multiplies them (linear-in-parameters models).
    coefficient_names: ClassVar[tuple[str, ...]] = ()
    #: Whether extend tokens (prefill, hand-off appends, recomputed tokens) change the predicted latency.
    prices_extend: ClassVar[bool] = False

    def __call__(self, batch: Batch) -> float:
        return self.predict(batch.size, sum(batch.context_lens), sum(batch.num_new_tokens) - batch.size)

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        raise NotImplementedError

    def coefficients(self) -> dict[str, Any]:
        """The parameters that rebuild this model via :func:`make_latency_model`."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.coefficients()})"


_REGISTRY: dict[str, type[LatencyModel]] = {}


def register_latency_model(name: str) -> Callable[[type[LatencyModel]], type[LatencyModel]]:
    def decorate(cls: type[LatencyModel]) -> type[LatencyModel]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def latency_model_class(name: str) -> type[LatencyModel]:
    """The latency model registered as ``name``; unknown names list the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(_REGISTRY))
        raise ConfigError("latency.model", f"unknown latency model {name!r}; valid: {valid}") from None


def latency_model_names() -> list[str]:
    return sorted(_REGISTRY)


def make_latency_model(name: str, coefficients: Mapping[str, Any]) -> LatencyModel:
    """Build model ``name`` from its coefficients (as written in a profile's ``fit``)."""
    cls = latency_model_class(name)
    try:
        return cls(**coefficients)
    except TypeError:
        valid = ", ".join(cls.coefficient_names) or "(see docs/profile-schema.md)"
        raise ConfigError(f"latency.{name}", f"bad coefficients {sorted(coefficients)}; expected {valid}") from None


def _positive(field: str, value: float) -> float:
    if not value > 0:
        raise ConfigError(field, f"must be > 0, got {value}")
    return float(value)


@register_latency_model("constant")
class ConstantModel(LatencyModel):
    """Every step takes ``latency_s`` whatever the batch (the throughput model's assumption)."""

    coefficient_names = ("latency_s",)

    def __init__(self, latency_s: float) -> None:
        self.latency_s = _positive("latency_s", latency_s)

    def __call__(self, batch: Batch) -> float:  # hot path: skip the features
        return self.latency_s

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.latency_s

    def coefficients(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s}


class ScaledModel(LatencyModel):
    """Another latency model's every step times ``factor`` (a drift probe's recorded factor, or a diagnosis's
    rescaling to observed step times); prices extend tokens exactly when ``base`` does."""

    def __init__(self, base: LatencyModel, factor: float) -> None:
        self.base = base
        self.factor = _positive("factor", factor)
        self.prices_extend = base.prices_extend  # type: ignore[misc]
        self.name = base.name  # type: ignore[misc]

    def __call__(self, batch: Batch) -> float:
        return self.factor * self.base(batch)

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.factor * self.base.predict(batch_size, context_tokens, extend_tokens)

    def coefficients(self) -> dict[str, Any]:
        return {"factor": self.factor, "base": self.base.coefficients()}


@register_latency_model("table")
class TableModel(LatencyModel):
    """Latency by batch size, linearly interpolated between entries; outside the table, the nearest entry's
    value (as the throughput model treats batches beyond its latency list)."""

    coefficient_names = ("batch_sizes", "latency_s")

    def __init__(self, batch_sizes: Sequence[int], latency_s: Sequence[float]) -> None:
        if not batch_sizes or len(batch_sizes) != len(latency_s):
            raise ConfigError("latency.table", "batch_sizes and latency_s must be non-empty and of equal length")
        pairs = sorted(zip(batch_sizes, latency_s, strict=True))
        if any(b < 1 for b, _ in pairs) or len({b for b, _ in pairs}) != len(pairs):
            raise ConfigError("latency.table.batch_sizes", "must be distinct integers >= 1")
        self.batch_sizes = [int(b) for b, _ in pairs]
        self.latency_s = [_positive("latency.table.latency_s", v) for _, v in pairs]
        self._cache: dict[int, float] = {}

    def __call__(self, batch: Batch) -> float:
        size = batch.size
        value = self._cache.get(size)
        if value is None:
            value = self._cache[size] = self.predict(size, 0, 0)
        return value

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        sizes, values = self.batch_sizes, self.latency_s
        k = bisect_left(sizes, batch_size)
        if k < len(sizes) and sizes[k] == batch_size:
            return values[k]
        if k == 0:
            return values[0]
        if k == len(sizes):
            return values[-1]
        slope = (values[k] - values[k - 1]) / (sizes[k] - sizes[k - 1])
        return values[k - 1] + slope * (batch_size - sizes[k - 1])

    def coefficients(self) -> dict[str, Any]:
        return {"batch_sizes": list(self.batch_sizes), "latency_s": list(self.latency_s)}


class LinearInParameters(LatencyModel):
    """``latency = sum(coef * feature)``: fitted by non-negative least squares (see ``trsim.fit``)."""

    def __init__(self, **coefs: float) -> None:
        if set(coefs) != set(self.coefficient_names):
            raise TypeError("coefficient names")
        values = [float(coefs[n]) for n in self.coefficient_names]
        if any(not v >= 0 for v in values) or not any(v > 0 for v in values):
            raise ConfigError(f"latency.{self.name}", f"coefficients must be >= 0 and not all 0, got {coefs}")
        self.values = values

    @staticmethod
    def features(batch_size: float, context_tokens: float, extend_tokens: float) -> list[float]:
        raise NotImplementedError

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        feats = self.features(batch_size, context_tokens, extend_tokens)
        return max(sum(c * f for c, f in zip(self.values, feats, strict=True)), 1e-9)

    def coefficients(self) -> dict[str, Any]:
        return dict(zip(self.coefficient_names, self.values, strict=True))


@register_latency_model("linear")
class LinearModel(LinearInParameters):
    """``a + b*batch_size + c*context_tokens`` (seconds)."""

    coefficient_names = ("a", "b", "c")

    def __init__(self, a: float, b: float, c: float) -> None:
        super().__init__(a=a, b=b, c=c)

    @staticmethod
    def features(batch_size: float, context_tokens: float, extend_tokens: float) -> list[float]:
        return [1.0, batch_size, context_tokens]


@register_latency_model("quadratic")
class QuadraticModel(LinearInParameters):
    """``a + b*batch + c*context_tokens + d*extend_tokens + e*batch**2``: prefill / hand-off appends cost
    ``d`` per token, and the ``e`` term bends the batch curve (compute saturating at large batches)."""

    coefficient_names = ("a", "b", "c", "d", "e")
    prices_extend = True

    def __init__(self, a: float, b: float, c: float, d: float, e: float) -> None:
        super().__init__(a=a, b=b, c=c, d=d, e=e)

    @staticmethod
    def features(batch_size: float, context_tokens: float, extend_tokens: float) -> list[float]:
        return [1.0, batch_size, context_tokens, extend_tokens, batch_size * batch_size]


class QuantizedModel(LatencyModel):
    """Rounds another model's latency to a whole number of quanta (at least one), as the throughput model
    discretizes time; used to compare simulation and model on identical step times."""

    def __init__(self, inner: LatencyModel, quantum_s: float) -> None:
        self.inner = inner
        self.quantum_s = _positive("quantum_s", quantum_s)

    def __call__(self, batch: Batch) -> float:
        return max(round(self.inner(batch) / self.quantum_s), 1) * self.quantum_s

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        raw = self.inner.predict(batch_size, context_tokens, extend_tokens)
        return max(round(raw / self.quantum_s), 1) * self.quantum_s

    def coefficients(self) -> dict[str, Any]:
        return {**self.inner.coefficients(), "quantum_s": self.quantum_s}


class PrefixCachedModel(LatencyModel):
    """Does not charge the prefill of tokens a model still holds in its prefix cache: on a request's first
    visit to model ``model``, ``Request.extra[key][model]`` leading tokens are cached (multi-turn sessions)."""

    def __init__(self, inner: LatencyModel, model: int, key: str) -> None:
        self.inner, self.model, self.key = inner, model, key

    def __call__(self, batch: Batch) -> float:
        m, saved = self.model, 0
        for req, new in zip(batch.requests, batch.num_new_tokens, strict=True):
            if req.anchors[m] == 0 and self.key in req.extra:
                saved += min(req.extra[self.key][m], new - 1)
        if not saved:
            return self.inner(batch)
        extend = sum(batch.num_new_tokens) - batch.size - saved
        return self.inner.predict(batch.size, sum(batch.context_lens), extend)

    def predict(self, batch_size: int, context_tokens: int, extend_tokens: int) -> float:
        return self.inner.predict(batch_size, context_tokens, extend_tokens)

    def coefficients(self) -> dict[str, Any]:
        return self.inner.coefficients()
