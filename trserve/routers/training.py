"""Training the learned token routers (``r2r``, ``citer``) on the local model pair; the ``train-routers`` command.

Both are small MLPs (torch on CPU here, numpy at serving time: :class:`trcore.programs.MLPRouter`) over the
signals a vLLM backend gives for the small model's step: top-k log-probabilities and the sampled token.

* ``citer`` predicts ``mismatch`` (the small model's token differs from the large model's greedy token) from
  confidence features only: "low-confidence tokens go to the large model";
* ``r2r`` predicts ``divergent`` (a mismatch the large model finds implausible, see :mod:`trserve.routers.data`)
  from the confidence features plus the sampled token's identity (a learned 4-d projection of the small
  model's input embedding, exported as one row per vocabulary id).

Prompts are split by prompt (index mod 5: 0 test, 1 validation, else train). The operating threshold routes a
target fraction of the validation tokens to the large model (``route_rate``, default 0.2: the papers expose the
threshold as a cost knob; R2R reports ~10-20% large-model tokens). Max-F1 is no use on this pair: its small model
disagrees with the large one on ~94% of positions, so max-F1 routes everything. Figures are on the test prompts;
the max-F1 point is reported alongside."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trcore.programs import MLPRouter
from trcore.programs.signals import EXTRA_FEATURES
from trserve.routers.data import TokenData, build_token_data, load_prompts
from trserve.routers.evaluate import best_f1_threshold, split_report, threshold_at_rate

#: Router name -> (label, whether the sampled token's identity is a feature).
RECIPES: dict[str, tuple[str, bool]] = {"citer": ("mismatch", False), "r2r": ("divergent", True)}
TOKEN_DIM = 4


@dataclass(frozen=True)
class FitConfig:
    """Training hyper-parameters (defaults are what the committed routers used)."""

    hidden_sizes: tuple[int, ...] = (32, 16)
    epochs: int = 800
    patience: int = 80
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    neutral_prob: float = 0.1
    route_rate: float = 0.2
    seed: int = 0


def split_masks(prompt_index: np.ndarray) -> dict[str, np.ndarray]:
    """Row masks of the train / val / test prompts (index mod 5: 0 test, 1 val, else train)."""
    fold = prompt_index % 5
    return {"train": fold >= 2, "val": fold == 1, "test": fold == 0}


def labels_for(name: str, data: TokenData, config: FitConfig) -> np.ndarray:
    label, _ = RECIPES[name]
    y = data.mismatch == 1 if label == "mismatch" else data.divergent(config.neutral_prob)
    return y.astype(np.float32)


def fit_router(name: str, data: TokenData, embedding: np.ndarray | None, config: FitConfig) -> dict[str, Any]:
    """Train one router; returns the exported :class:`MLPRouter`, its raw feature matrix and the labels."""
    import torch

    torch.manual_seed(config.seed)
    _, use_token = RECIPES[name]
    y = labels_for(name, data, config)
    masks = split_masks(data.prompt_index)
    x = data.features.astype(np.float32)
    mean, spread = x[masks["train"]].mean(0), x[masks["train"]].std(0)
    constant = spread < 1e-6  # e.g. "sampled is top-1" is always 1 under greedy decoding
    std = np.where(constant, 1.0, spread)
    emb = embedding[data.token_ids] if use_token and embedding is not None else None
    net = _Net(x.shape[1], emb.shape[1] if emb is not None else 0, config.hidden_sizes)
    inputs = torch.tensor((x - mean) / std), None if emb is None else torch.tensor(emb, dtype=torch.float32)
    _train(net, inputs, torch.tensor(y), masks, config)
    table = None if emb is None or embedding is None else net.token_table(embedding)
    layers = net.dense_layers()
    # A feature constant in training got no gradient; zero its weights so that values never seen in training
    # (sampling instead of greedy decoding) do not move the score through an untrained weight.
    layers[0][0][: len(constant)][constant] = 0.0
    router = MLPRouter(
        layers=layers,
        mean=mean.astype(np.float64),
        std=std.astype(np.float64),
        top_k=x.shape[1] - 5,
        threshold=0.5,
        token_table=table,
    )
    raw = x if table is None else np.concatenate([x, table[data.token_ids]], axis=1)
    return {"router": router, "features": raw.astype(np.float64), "labels": y, "masks": masks}


class _Net:
    """Scalar features (standardized) + optional projected token embedding -> ReLU MLP -> one logit."""

    def __init__(self, num_scalar: int, embedding_dim: int, hidden_sizes: Sequence[int]) -> None:
        from torch import nn

        self.proj = nn.Linear(embedding_dim, TOKEN_DIM) if embedding_dim else None
        width, layers = num_scalar + (TOKEN_DIM if embedding_dim else 0), []
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))
        self.modules = [m for m in (self.proj, self.mlp) if m is not None]

    def parameters(self) -> list[Any]:
        return [p for m in self.modules for p in m.parameters()]

    def __call__(self, scalar: Any, emb: Any) -> Any:
        import torch

        x = scalar if self.proj is None else torch.cat([scalar, self.proj(emb)], dim=1)
        return self.mlp(x)[:, 0]

    def state(self) -> list[dict[str, Any]]:
        return [{k: v.clone() for k, v in m.state_dict().items()} for m in self.modules]

    def load(self, state: list[dict[str, Any]]) -> None:
        for module, saved in zip(self.modules, state, strict=True):
            module.load_state_dict(saved)

    def dense_layers(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        linears = [m for m in self.mlp if hasattr(m, "weight")]
        return tuple(
            (lin.weight.detach().double().numpy().T.copy(), lin.bias.detach().double().numpy()) for lin in linears
        )

    def token_table(self, embedding: np.ndarray) -> np.ndarray:
        assert self.proj is not None
        weight, bias = self.proj.weight.detach().double().numpy(), self.proj.bias.detach().double().numpy()
        table: np.ndarray = embedding.astype(np.float64) @ weight.T + bias
        return table.astype(np.float16).astype(np.float64)  # what the file will hold


def _train(net: _Net, inputs: tuple[Any, Any], y: Any, masks: dict[str, np.ndarray], config: FitConfig) -> None:
    """Full-batch Adam on the train rows, early stopping on the validation loss (best state kept)."""
    import torch

    scalar, emb = inputs
    loss_fn = torch.nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    train, val = torch.tensor(masks["train"]), torch.tensor(masks["val"])

    def loss_on(rows: Any) -> Any:
        return loss_fn(net(scalar[rows], None if emb is None else emb[rows]), y[rows])

    best, best_state, since_best = float("inf"), net.state(), 0
    for _ in range(config.epochs):
        optimizer.zero_grad()
        loss_on(train).backward()
        optimizer.step()
        with torch.no_grad():
            val_loss = float(loss_on(val))
        if val_loss < best - 1e-5:
            best, best_state, since_best = val_loss, net.state(), 0
        elif (since_best := since_best + 1) >= config.patience:
            break
    net.load(best_state)


def finish_router(
    name: str, fitted: dict[str, Any], baseline: np.ndarray, provenance: dict[str, Any], route_rate: float
) -> Any:
    """Choose the threshold on validation, score every split, compare with the confidence baseline."""
    from dataclasses import replace

    router, features, labels, masks = fitted["router"], fitted["features"], fitted["labels"], fitted["masks"]
    scores = router.scores_of(features)
    threshold = round(threshold_at_rate(scores[masks["val"]], route_rate), 4)
    metrics = split_report(scores, labels, masks, threshold)
    best_f1 = best_f1_threshold(scores[masks["val"]], labels[masks["val"]])
    # Baseline at equal cost: 1 - p_top1 thresholded to route as many test tokens as the router does.
    rate = metrics["test"]["route_rate"]
    test = masks["test"]
    base = split_report(
        baseline[test], labels[test], {"test": np.ones(int(test.sum()), bool)}, threshold_at_rate(baseline[test], rate)
    )
    label, use_token = RECIPES[name]
    meta = {**provenance, "router": name, "label": label, "features": _feature_names(router.top_k, use_token)}
    return replace(router, threshold=threshold, meta=meta), {
        **meta,
        "threshold": threshold,
        "threshold_rule": f"routes {route_rate:.0%} of the validation tokens to the large model",
        "max_f1_point": {"threshold": best_f1, "test": split_report(scores, labels, masks, best_f1)["test"]},
        "metrics": metrics,
        "baseline_1_minus_p_top1_at_equal_route_rate": base["test"],
    }


def _feature_names(top_k: int, use_token: bool) -> list[str]:

    names = [f"top{i + 1}_logprob" for i in range(top_k)] + list(EXTRA_FEATURES)
    return names + ([f"sampled_token_row[{i}]" for i in range(TOKEN_DIM)] if use_token else [])


def run_training(
    small_dir: Path,
    large_dir: Path,
    prompts_path: Path,
    out_dir: Path,
    cache_dir: Path | None,
    max_new_tokens: int,
    top_k: int,
    command: str,
    config: FitConfig,
    threads: int = 1,
    pair: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole pipeline: data (cached by inputs), both routers, weights + metrics under ``out_dir``; torch uses
    ``threads`` CPU threads. ``pair`` (the model pair's name and tokenizer identity) goes into every router's
    metadata, so a router names the pair it belongs to wherever it is copied (``trsim.pairs.pair_of_router``)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    started = time.perf_counter()
    prompts = load_prompts(prompts_path)
    tokenizer = AutoTokenizer.from_pretrained(large_dir)
    small = AutoModelForCausalLM.from_pretrained(small_dir, dtype=torch.float32).eval()
    large = AutoModelForCausalLM.from_pretrained(large_dir, dtype=torch.float32).eval()
    key = _data_key(small_dir, large_dir, prompts_path, max_new_tokens, top_k)
    cached = cache_dir / f"router-data-{key}.npz" if cache_dir else None
    data_cached = cached is not None and cached.exists()
    if cached is not None and data_cached:
        data = TokenData.load(cached)
    else:
        data = build_token_data(small, large, tokenizer, prompts, max_new_tokens, top_k)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            data.save(cached)
    data_seconds = time.perf_counter() - started
    embedding = small.get_input_embeddings().weight.detach().float().numpy()
    provenance = {
        "command": command,
        **({"pair": pair} if pair is not None else {}),
        "small_model": {"path": str(small_dir), "weights_sha256": _weights_sha256(small_dir)},
        "large_model": {"path": str(large_dir), "weights_sha256": _weights_sha256(large_dir)},
        "data_cached": data_cached,
        "prompts": str(prompts_path.name),
        "num_prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "fit": asdict(config),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    baseline = 1.0 - np.exp(data.features[:, 0].astype(np.float64))  # 1 - p_top1 (Co-LLM's default score)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"data_seconds": round(data_seconds, 1), "num_tokens": len(data.token_ids)}
    for name in RECIPES:
        fit_started = time.perf_counter()
        router, report = finish_router(
            name, fit_router(name, data, embedding, config), baseline, provenance, config.route_rate
        )
        router.save(out_dir / f"{name}.npz")
        _check_reload(out_dir / f"{name}.npz", router, fit_router_features(router, data))
        report["train_seconds"] = round(time.perf_counter() - fit_started, 1)
        report["data_seconds"] = round(data_seconds, 1)
        (out_dir / f"{name}.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        summary[name] = {"threshold": report["threshold"], **report["metrics"]["test"]}
    summary["total_seconds"] = round(time.perf_counter() - started, 1)
    return summary


def fit_router_features(router: MLPRouter, data: TokenData) -> np.ndarray:
    """The raw feature matrix a serving backend would build for ``router`` on these rows."""
    x = data.features.astype(np.float64)
    if router.token_table is None:
        return x
    return np.concatenate([x, router.token_table[data.token_ids]], axis=1)


def _check_reload(path: Path, router: MLPRouter, features: np.ndarray) -> None:
    """The file, read back by the serving code, must score as the trained router does."""
    diff = float(np.max(np.abs(MLPRouter.load(path).scores_of(features) - router.scores_of(features))))
    if diff > 1e-3:
        raise RuntimeError(f"{path}: reloaded router scores differ by {diff:.2e}")


def _data_key(small_dir: Path, large_dir: Path, prompts: Path, max_new_tokens: int, top_k: int) -> str:
    digest = hashlib.sha256(f"{_weights_sha256(small_dir)}:{_weights_sha256(large_dir)}".encode())
    digest.update(hashlib.sha256(prompts.read_bytes()).digest())
    digest.update(f"{max_new_tokens}:{top_k}:v1".encode())
    return digest.hexdigest()[:16]


def _weights_sha256(model_dir: Path) -> str:
    """The weights' sha256 from the prepared model's manifest, else hashed here."""
    manifest = model_dir / "manifest.json"
    if manifest.exists():
        files = json.loads(manifest.read_text()).get("files", {})
        if "model.safetensors" in files:
            return str(files["model.safetensors"]["sha256"])
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
