"""The roofline's reference checks, as numbers: the paper's A100 decode steps and this machine's CPU profiles.

``python -m trsim.roofline_checks --out docs/plan/roofline_checks.json`` writes what docs/planning.md quotes;
tests/sim/test_roofline.py asserts the same figures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trsim.profile import load_profile
from trsim.roofline import RooflineModel, parse_roofline_spec
from trsim.roofline_fit import RooflineFit, fit_roofline_to_profiles

#: R2R's A100 decode steps (ms) and the roofline spec each is compared with: batch 1, 1,024 tokens of context.
#: 32B needs tp >= 2 here: its bf16 weights alone take 31 ms to stream from one A100-80G's HBM.
PAPER_A100_STEPS = {
    "roofline:a100-80g:DeepSeek-R1-Distill-Qwen-1.5B:tp1": 6.0,
    "roofline:a100-80g:DeepSeek-R1-Distill-Qwen-32B:tp2": 27.9,
}
PAPER_CONTEXT = 1024
#: The CPU pair (trserve/modelprep): SmolLM2-135M-Instruct (the large model, tied head) and its first 10 layers
#: with a fitted untied head (the small one); shapes from SmolLM2-135M's config.json.
SMOLLM2_135M = {
    "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
    "num_key_value_heads": 3, "vocab_size": 49152, "num_hidden_layers": 30,
}  # fmt: skip
CPU_SHAPES = {"small": {**SMOLLM2_135M, "num_hidden_layers": 10}, "large": SMOLLM2_135M}
CPU_PROFILES = Path(__file__).resolve().parent.parent / "calibration" / "profiles" / "cpu-2core"


def paper_checks() -> list[dict[str, Any]]:
    """Default-parameter roofline vs the paper's A100 decode steps."""
    rows = []
    for spec, paper_ms in PAPER_A100_STEPS.items():
        cost = parse_roofline_spec(spec).cost(1, PAPER_CONTEXT, 0)
        rows.append({"spec": spec, "batch": 1, "context": PAPER_CONTEXT, "paper_ms": paper_ms,
                     "roofline_ms": cost.step_s * 1e3, "error": cost.step_s * 1e3 / paper_ms - 1,
                     "bound": cost.bound})  # fmt: skip
    return rows


def cpu_fit(profiles_dir: Path = CPU_PROFILES) -> tuple[RooflineFit, list[dict[str, Any]]]:
    """One set of CPU parameters fitted to both CPU profiles, and each profile's MAPE beside its own fit's."""
    names = sorted(CPU_SHAPES)
    profiles = [load_profile(profiles_dir / f"{name}.json") for name in names]
    models = [RooflineModel("cpu-2core", CPU_SHAPES[name], dtype="fp32") for name in names]
    fit = fit_roofline_to_profiles(profiles, models)
    rows = [
        {"profile": name, "num_samples": len(p.samples), "roofline_mape": m,
         "profile_fit": p.fit.model if p.fit else None, "profile_fit_mape": p.fit.mape if p.fit else None}
        for name, p, m in zip(names, profiles, fit.mapes, strict=True)
    ]  # fmt: skip
    return fit, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fit, cpu_rows = cpu_fit()
    report = {
        "command": "python -m trsim.roofline_checks --out " + str(args.out),
        "defaults": asdict(RooflineModel("a100-80g", "Qwen3-0.6B").params),
        "paper_a100": paper_checks(),
        "cpu": {"fitted": list(fit.fitted), "params": asdict(fit.params), "profiles": cpu_rows},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
