"""Profiles rebuilt from the log of a ``gpu_profile.py`` run whose fit or write step failed on the device.

The log keeps one line per timed cell (``[model] decode b=8 ctx=512 new=1: 37.37 ms median, spread ...``)
and one per skipped cell. This script turns those lines into profiles of the same schema: one sample per
cell at its logged median (the per-repeat times are not in the log), fitted here with the same fitter, and
says so in ``machine.method``. Nothing is measured here; the hardware facts come from the options.

    python calibration/gpu_log_profiles.py calibration/runs/h200-2026-12-04.log --hardware-tag h200 \\
        --accelerator "NVIDIA H200" --run-note "torch 2.11 / transformers 5.x image, CUDA graphs"
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from calibration.gpu_files import find_shapes, load_config, profile_record, write_profile  # noqa: E402
from calibration.gpu_steps import Cell, shape_summary  # noqa: E402
from calibration.profile_fit import fit_all  # noqa: E402

TIMED = re.compile(r"^\[(?P<llm>[^\]]+)\] (?:decode|prefill|extend) b=(?P<b>\d+) ctx=(?P<ctx>\d+) new=(?P<new>\d+): "
                   r"(?P<ms>[0-9.]+) ms median")  # fmt: skip
SKIPPED = re.compile(r"^\[(?P<llm>[^\]]+)\] (?P<cell>(?:decode|prefill|extend) b=\d+ ctx=\d+ new=\d+): skipped "
                     r"\((?P<reason>.*)\)$")  # fmt: skip


def parse_log(text: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per model: ``samples`` (one per timed cell, at its median) and ``skipped`` cells with their reasons."""
    models: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for line in text.splitlines():
        if timed := TIMED.match(line):
            cell = Cell(int(timed["b"]), int(timed["ctx"]), int(timed["new"]))
            entry = models.setdefault(timed["llm"], {"samples": [], "skipped": []})
            entry["samples"].append(cell.sample(float(timed["ms"]) / 1e3))
        elif skipped := SKIPPED.match(line):
            entry = models.setdefault(skipped["llm"], {"samples": [], "skipped": []})
            entry["skipped"].append({"cell": skipped["cell"], "reason": skipped["reason"]})
    return models


def build_profile(llm: str, parsed: dict[str, list[dict[str, Any]]], args: argparse.Namespace,
                  shape: dict[str, int] | None) -> dict[str, Any]:  # fmt: skip
    """One profile from one model's parsed lines; ``machine.method`` says how it was made."""
    fits, fitter = fit_all(parsed["samples"])
    method = (
        f"Rebuilt by calibration/gpu_log_profiles.py from the log {args.log.name} of a calibration/gpu_profile.py "
        f"run on {args.accelerator} ({args.run_note}). Each sample is one cell's median over its timed repeats "
        "as the log printed it (the per-repeat times were not kept); the run's own fit step had failed, so the "
        f"fits were made here: least squares on relative error, non-negative coefficients ({fitter})."
    )
    machine = {"tag": args.hardware_tag, "accelerator": args.accelerator, "device": "cuda",
               "description": f"1x {args.accelerator}, bf16 ({args.run_note})", "method": method,
               "model_shape": shape, "skipped": parsed["skipped"]}  # fmt: skip
    backend = f"transformers StaticCache, bf16, {args.run_note}"
    return profile_record(llm, backend, machine, parsed["samples"], fits)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="stderr of a gpu_profile.py run")
    ap.add_argument("--hardware-tag", required=True, help="profiles go to <out-dir>/<tag>/")
    ap.add_argument("--accelerator", required=True, help="the GPU the run measured, e.g. 'NVIDIA H200'")
    ap.add_argument("--run-note", default="", help="what else is known of the run (software, CUDA graphs)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "calibration" / "profiles")
    ap.add_argument("--shapes-dir", type=Path, default=REPO / "models" / "shapes")
    args = ap.parse_args(argv)
    try:
        models = parse_log(args.log.read_text())
    except OSError as exc:
        print(f"error: log: {exc.strerror}: {args.log}", file=sys.stderr)
        return 2
    models = {llm: parsed for llm, parsed in models.items() if parsed["samples"]}
    if not models:
        print(f"error: log: no timed cells in {args.log}", file=sys.stderr)
        return 2
    shapes, out = find_shapes(args.shapes_dir), args.out_dir / args.hardware_tag
    out.mkdir(parents=True, exist_ok=True)
    for llm, parsed in sorted(models.items()):
        shape = shape_summary(load_config(shapes[llm])) if llm in shapes else None
        path = write_profile(build_profile(llm, parsed, args, shape), out)
        print(f"{path}: {len(parsed['samples'])} samples, {len(parsed['skipped'])} cells skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
