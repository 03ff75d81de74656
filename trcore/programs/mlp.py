"""Learned token routers: a small MLP over per-token signals, run in pure numpy, stored as one ``.npz`` file.

File layout (written by :meth:`MLPRouter.save`, read by :meth:`MLPRouter.load`, no pickle):

* ``W0, b0, W1, b1, ...``: dense layers, ReLU between them, sigmoid on the single output;
* ``mean, std``: standardization of the confidence features (and of the hidden state, when used);
* ``token_table`` (optional): one learned row per vocabulary id for the sampled token;
* ``meta``: a JSON string: ``top_k``, ``hidden_dim``, ``threshold`` and free-form training provenance.

Feature row = [confidence features (:func:`confidence_features`), hidden state, token_table[sampled]].
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trcore.errors import ConfigError
from trcore.programs.signals import EXTRA_FEATURES, confidence_features, top_logprobs_of
from trcore.step import StepResult
from trcore.subserver import ProtocolError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class MLPRouter:
    """A trained per-token scorer: :meth:`scores` gives, per request of a step, the probability that the
    token should go to the large model; ``threshold`` is the operating point chosen at training time."""

    layers: tuple[tuple[FloatArray, FloatArray], ...]
    mean: FloatArray
    std: FloatArray
    top_k: int
    threshold: float
    hidden_dim: int = 0
    token_table: FloatArray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ConfigError("router.top_k", f"must be >= 1, got {self.top_k}")
        width = self.num_inputs
        for i, (weight, bias) in enumerate(self.layers):
            if weight.ndim != 2 or weight.shape[0] != width or bias.shape != (weight.shape[1],):
                raise ConfigError("router", f"layer {i} has shape {weight.shape}, expected ({width}, n)")
            width = weight.shape[1]
        if width != 1:
            raise ConfigError("router", f"last layer must have one output, has {width}")
        if self.mean.shape != (self.num_normalized,) or self.std.shape != (self.num_normalized,):
            raise ConfigError("router", f"mean/std must have {self.num_normalized} entries")
        if not np.all(self.std > 0):
            raise ConfigError("router", "std entries must be > 0")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError("router.threshold", f"must be within [0, 1], got {self.threshold}")

    @property
    def num_normalized(self) -> int:
        """Inputs that are standardized: confidence features and the hidden state."""
        return self.top_k + len(EXTRA_FEATURES) + self.hidden_dim

    @property
    def num_inputs(self) -> int:
        token_dim = 0 if self.token_table is None else self.token_table.shape[1]
        return self.num_normalized + token_dim

    @property
    def required_signals(self) -> frozenset[str]:
        signals = {"token_ids", "top_logprobs"}
        if self.hidden_dim:
            signals.add("hidden")
        return frozenset(signals)

    def features(self, step: StepResult) -> FloatArray:
        """The feature matrix (one row per request of the step), before standardization."""
        tops = top_logprobs_of(step)
        rows = np.array(
            [confidence_features(top, tok, self.top_k) for top, tok in zip(tops, step.token_ids, strict=True)],
            dtype=np.float64,
        ).reshape(len(step), -1)
        parts = [rows]
        if self.hidden_dim:
            parts.append(self._hidden(step))
        if self.token_table is not None:
            ids = np.asarray(step.token_ids, dtype=np.int64)
            known = (ids >= 0) & (ids < self.token_table.shape[0])
            table_rows = np.zeros((len(step), self.token_table.shape[1]))
            table_rows[known] = self.token_table[ids[known]]
            parts.append(table_rows)
        return np.concatenate(parts, axis=1)

    def _hidden(self, step: StepResult) -> FloatArray:
        if step.hidden is None or len(step.hidden) != len(step):
            raise ProtocolError("step result lacks hidden states (this router was trained on them)")
        hidden = np.asarray([np.asarray(h, dtype=np.float64).reshape(-1) for h in step.hidden])
        if hidden.shape[1] != self.hidden_dim:
            raise ProtocolError(f"hidden states have {hidden.shape[1]} dims, router expects {self.hidden_dim}")
        return hidden

    def scores_of(self, features: FloatArray) -> FloatArray:
        """Forward pass on a raw feature matrix: probabilities in [0, 1], one per row."""
        x = features.copy()
        n = self.num_normalized
        x[:, :n] = (x[:, :n] - self.mean) / self.std
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight + bias
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        out: FloatArray = 1.0 / (1.0 + np.exp(-np.clip(x[:, 0], -60.0, 60.0)))
        return out

    def scores(self, step: StepResult) -> FloatArray:
        """Per request of the step: probability that its token belongs to the large model."""
        if len(step) == 0:
            return np.zeros(0)
        return self.scores_of(self.features(step))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the router as a compressed ``.npz`` (see the module docstring)."""
        arrays: dict[str, Any] = {"mean": self.mean, "std": self.std}
        for i, (weight, bias) in enumerate(self.layers):
            arrays[f"W{i}"], arrays[f"b{i}"] = weight.astype(np.float32), bias.astype(np.float32)
        if self.token_table is not None:
            arrays["token_table"] = self.token_table.astype(np.float16)
        meta = {**self.meta, "top_k": self.top_k, "hidden_dim": self.hidden_dim, "threshold": self.threshold}
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MLPRouter:
        """Read a router written by :meth:`save`; a missing or malformed file is a ConfigError."""
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        except (OSError, ValueError) as exc:
            raise ConfigError("router", f"cannot read router weights {os.fspath(path)!r}: {exc}") from None
        try:
            meta = json.loads(str(arrays.pop("meta")))
            num_layers = sum(1 for key in arrays if key.startswith("W"))
            layers = tuple(
                (arrays[f"W{i}"].astype(np.float64), arrays[f"b{i}"].astype(np.float64)) for i in range(num_layers)
            )
            table = arrays.get("token_table")
            return cls(
                layers=layers,
                mean=arrays["mean"].astype(np.float64),
                std=arrays["std"].astype(np.float64),
                top_k=int(meta.pop("top_k")),
                threshold=float(meta.pop("threshold")),
                hidden_dim=int(meta.pop("hidden_dim", 0)),
                token_table=None if table is None else table.astype(np.float64),
                meta=meta,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError("router", f"malformed router file {os.fspath(path)!r}: {exc!r}") from None


def random_router(
    rng: np.random.Generator,
    top_k: int = 4,
    hidden_sizes: Sequence[int] = (8,),
    threshold: float = 0.5,
    **kw: Any,
) -> MLPRouter:
    """An untrained router with random weights (tests, benchmarks); ``kw`` may set hidden_dim / token_table."""
    hidden_dim = int(kw.get("hidden_dim", 0))
    table = kw.get("token_table")
    num_normalized = top_k + len(EXTRA_FEATURES) + hidden_dim
    width = num_normalized + (0 if table is None else table.shape[1])
    layers = []
    for size in (*hidden_sizes, 1):
        layers.append((rng.normal(0.0, 1.0 / np.sqrt(width), (width, size)), rng.normal(0.0, 0.1, size)))
        width = size
    return MLPRouter(
        layers=tuple(layers),
        mean=np.zeros(num_normalized),
        std=np.ones(num_normalized),
        top_k=top_k,
        threshold=threshold,
        hidden_dim=hidden_dim,
        token_table=table,
    )
