"""What the adaptive controller's grid search costs and loses against the full search (issue #27).

    .venv/bin/python benchmarks/grid_search.py [--out docs/bench-sim/adaptive/grid-search.json]

For every phase of the committed adaptive scenarios, on the phase's calibrated inputs (``trsim.adaptive.
phase_models``: the scenario's tables, P, C and concurrency) and with the controller's knobs (method, ``min_gain``,
seed, and the sampling precision it derives from ``min_gain``): the full search over every feasible vector
(``ThroughputModel.optimize``) beside ``optimize_on_grid`` (the grid, then the box around its best), each with its
CPU seconds and the number of vectors solved; then both vectors solved alone on the same draws, and the grid's
over the full's. Run it under the measurement lock: CPU seconds are measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trcore.adaptive import sampling_precision
from trcore.throughput import SamplingConfig, feasible_thresholds, optimize_on_grid
from trsim.adaptive import phase_models
from trsim.scenario import load_scenario, scenario_config

SCENARIOS = (
    "trsim/scenarios/adaptive-phases.yaml",
    "trsim/scenarios/adaptive-static-loss.yaml",
    "trsim/scenarios/adaptive-collapse.yaml",
    "trsim/scenarios/adaptive-learn.yaml",
)


def timed(fn: Any) -> tuple[Any, float]:
    started = time.process_time()
    result = fn()
    return result, time.process_time() - started


def compare(model: Any, n: int, knobs: Any) -> dict[str, Any]:
    """The full search and the grid search on one phase's model, side by side."""
    model.sampling = SamplingConfig(seed=knobs.seed, rel_std_error=sampling_precision(knobs.min_gain))
    opts = {"min_gain": knobs.min_gain, "method": knobs.method}
    full, full_s = timed(lambda: model.optimize(n, **opts))
    grid, grid_s = timed(lambda: optimize_on_grid(model, n, keep=[(1,) * model.num_models], **opts))
    alone = {
        tuple(v): model.solve(n, v, method=knobs.method).throughput_tok_s for v in (full.thresholds, grid.thresholds)
    }
    return {
        "concurrency": n,
        "feasible": sum(1 for _ in feasible_thresholds(model.spec.batch_caps(n), n)),
        "full": {"thresholds": list(full.thresholds), "cpu_s": full_s, "solved": len(full.candidates)},
        "grid": {"thresholds": list(grid.thresholds), "cpu_s": grid_s, "solved": len(grid.candidates)},
        "grid_over_full_tok_s": alone[tuple(grid.thresholds)] / alone[tuple(full.thresholds)],
        "cpu_ratio": grid_s / full_s if full_s > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", help="phase scenario (repeat) [the committed four]")
    parser.add_argument("--out", type=Path, default=Path("docs/bench-sim/adaptive/grid-search.json"))
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/grid_search.py", *(argv if argv is not None else sys.argv[1:])]),
        "inputs": "the scenario files (tables, routing, concurrency, controller knobs); this run's CPU seconds",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cases": [],
    }
    for path in args.scenario or SCENARIOS:
        spec = load_scenario(path)
        config = scenario_config(spec, Path(path).parent, adaptive=True)
        knobs = config.adaptive.controller
        plain = replace(config, adaptive=None)
        for k, (model, n) in enumerate(phase_models(plain, plain.phases, knobs)):
            row = {"scenario": spec.name, "phase": k, **compare(model, n, knobs)}
            doc["cases"].append(row)
            print(json.dumps(row), flush=True)
    big = [c for c in doc["cases"] if c["feasible"] > knobs.max_candidates]
    doc["summary"] = {
        "min_grid_over_full_tok_s": min(c["grid_over_full_tok_s"] for c in doc["cases"]),
        "past_max_candidates": {
            "cases": len(big),
            "full_cpu_s": sum(c["full"]["cpu_s"] for c in big),
            "grid_cpu_s": sum(c["grid"]["cpu_s"] for c in big),
        },
    }
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
