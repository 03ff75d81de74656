"""Context-dependent step latencies for the R2R pair on A100-80G, as calibration profiles (docs/profile-schema.md),
made from the roofline model (trsim/roofline.py) anchored to the paper's measured steps.

    python benchmarks/roofline_profile.py [--out docs/bench-emulated/memory/profiles]

For each model (DeepSeek-R1-Distill-Qwen-1.5B at tp 1, -32B at tp 2, bf16, shapes from models/shapes, the A100-80G
datasheet from trsim/data/hardware.yaml): every roofline parameter at its default (``RooflineParams``) except
``step_overhead_s``, set so that a one-request step with no context takes the paper's A100 latency
(models/r2r-qwen-1.5b-32b/pair.yaml: 6.0 ms and 27.9 ms). The roofline is then sampled over the batches, contexts
and extends a reasoning load reaches, and the profile's ``quadratic`` fit (``a + b*batch + c*context + d*extend +
e*batch**2``) is what emulated engines and the simulator read. It is fitted in two stages, so the decode steps that
make up almost every step keep the roofline's figures: a, b, c, e to the steps without extend, then d, the price of
an extend token, to the rest (the joint fit, which bends the decode steps to follow the roofline's kink where extend
turns compute-bound, is kept in ``other_fits``). ``calibration`` records the anchor, the roofline's
parameters, the fit's error against the roofline, and the engine: blocks of 16, the KV tokens one A100-80G holds
beside the model's weights at vLLM's 0.9 utilization (``trsim.roofline.max_batch_tokens``; per GPU of the tp group,
so the pipeline's token capacity) and ``max_num_seqs`` 256.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from trsim.fit import LatencySample, mape
from trsim.latency import make_latency_model
from trsim.profile import FitRecord, make_profile, save_profile
from trsim.roofline import RooflineModel, max_batch_tokens, with_params

HARDWARE = "a100-80g"
#: (name in the pair, shape, tp, the paper's A100 step latency in seconds).
MODELS = (
    ("small", "DeepSeek-R1-Distill-Qwen-1.5B", 1, 6.0e-3),
    ("large", "DeepSeek-R1-Distill-Qwen-32B", 2, 27.9e-3),
)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256)
CONTEXT_PER_REQUEST = (0, 64, 256, 512, 1024, 2048)
EXTENDS = (0, 64, 256, 1024, 2048)
BLOCK_SIZE = 16
MAX_NUM_SEQS = 256
SOURCE = "models/r2r-qwen-1.5b-32b/pair.yaml latencies (the R2R paper's A100 steps)"


def anchored(shape: str, tp: int, paper_s: float) -> RooflineModel:
    """The roofline of ``shape`` whose one-request, no-context step takes ``paper_s``."""
    model = RooflineModel(HARDWARE, shape, tp=tp)
    gap = paper_s - model.predict(1, 0, 0)
    return with_params(model, step_overhead_s=model.params.step_overhead_s + gap)


def samples(model: RooflineModel) -> list[LatencySample]:
    """The roofline on the grid: batch x context per request x extend (extends only up to 8 tokens per request)."""
    out = []
    for b in BATCHES:
        for ctx in CONTEXT_PER_REQUEST:
            for ext in EXTENDS:
                if ext <= 8 * b or ext == 0:
                    out.append(LatencySample(b, b * ctx, ext, model.predict(b, b * ctx, ext)))
    return out


def profile_of(name: str, shape: str, tp: int, paper_s: float) -> dict[str, object]:
    model = anchored(shape, tp, paper_s)
    engine = {"block_size": BLOCK_SIZE, "max_num_seqs": MAX_NUM_SEQS, "kv_capacity_tokens": max_batch_tokens(model),
              "kv_bytes_per_token_per_gpu": model.kv_bytes_per_token(), "weight_bytes_per_gpu": model.weight_bytes(),
              "memory_fraction": 0.9}  # fmt: skip
    calibration = {
        "method": "roofline (trsim/roofline.py) sampled on a grid, then fitted; not measured",
        "anchor": {
            "batch_size": 1,
            "context_tokens": 0,
            "latency_s": paper_s,
            "source": SOURCE,
            "roofline_default_s": RooflineModel(HARDWARE, shape, tp=tp).predict(1, 0, 0),
        },
        "roofline": {"hardware": HARDWARE, "shape": shape, "tp": tp, "dtype": "bf16", **asdict(model.params)},
        "coefficients": "a (fixed per step): the anchor's overhead plus the roofline's weight read; b, e (per request):"
        " the roofline's request overhead and LM head; c (per context token): the KV read at the A100's bandwidth;"
        " d (per extend token): the roofline's compute for prefill and recompute",
        "grid": {"batches": BATCHES, "context_per_request": CONTEXT_PER_REQUEST, "extends": EXTENDS},
        "engine": engine,
    }
    grid = samples(model)
    profile = make_profile(
        shape,
        {
            "description": f"{HARDWARE} x{tp} (roofline, not measured)",
            "device": "cuda",
            "accelerator": "NVIDIA A100 80GB",
        },
        grid,
        fit_models=("quadratic", "linear"),
        backend=f"roofline {HARDWARE} tp{tp} bf16, anchored to the paper's step",
        calibration=calibration,
    )
    fit = two_stage_fit(grid)
    profile = profile.model_copy(
        update={"fit": fit, "other_fits": [f for f in (profile.fit, *profile.other_fits) if f]}
    )
    return {"name": name, "profile": profile}


def two_stage_fit(grid: list[LatencySample]) -> FitRecord:
    """``quadratic`` with a, b, c, e fitted to the decode samples and d (per extend token) to the others, on
    relative residuals: d = sum(x * (1 - y)) / sum(x * x) with x = extend / latency, y = decode part / latency."""
    from scipy.optimize import lsq_linear

    decode = [s for s in grid if s.extend_tokens == 0]
    rows = np.array([[1.0, s.batch_size, s.context_tokens, s.batch_size**2] for s in decode])
    lat = np.array([s.latency_s for s in decode])
    a, b, c, e = lsq_linear(rows / lat[:, None], np.ones(len(decode)), bounds=(0.0, np.inf)).x
    coefficients = {"a": float(a), "b": float(b), "c": float(c), "d": 0.0, "e": float(e)}
    model = make_latency_model("quadratic", coefficients)
    extends = [s for s in grid if s.extend_tokens > 0]
    xs = [s.extend_tokens / s.latency_s for s in extends]
    ys = [model.predict(s.batch_size, s.context_tokens, 0) / s.latency_s for s in extends]
    coefficients["d"] = max(0.0, sum(x * (1 - y) for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs))
    final = make_latency_model("quadratic", coefficients)
    return FitRecord(model="quadratic", coefficients=coefficients, mape=mape(final, grid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/bench-emulated/memory/profiles")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, shape, tp, paper_s in MODELS:
        made = profile_of(name, shape, tp, paper_s)
        profile = made["profile"]
        save_profile(profile, out / f"{name}.json")  # type: ignore[arg-type]
        fit = profile.fit  # type: ignore[attr-defined]
        print(f"{name}: {shape} tp{tp}: {fit.model} {fit.coefficients} MAPE {fit.mape:.2%} -> {out / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
