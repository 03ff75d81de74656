"""Self-tuning thresholds against the oracle (issue #27, deliverable 4): every strategy over each phase scenario.

    .venv/bin/python benchmarks/adaptive_bench.py [--scenario trsim/scenarios/adaptive-phases.yaml ...]
        [--bin-s 5] [--out docs/bench-sim/adaptive/adaptive.json] [--plot docs/bench-sim/adaptive/adaptive.png]

Per scenario, in one run and on the same seeds: ``adaptive`` (``--thresholds adaptive``, the scenario's
``adaptive:`` knobs, from the scenario's vector), ``b1`` (B = 1 throughout), ``static-K`` (phase K's offline B*
throughout), ``oracle`` (each phase's B* applied at its start, the phase ``thresholds`` hook) and, for a scenario
whose models set thresholds, ``scenario`` (that vector throughout). Each phase's B* is what ``optimize``
(``ThroughputModel.optimize``, the scenario's ``adaptive.method`` and ``min_gain``, as the controller solves) picks
for the phase's P, C and concurrency on the scenario's latency tables. The best static vector is the best over
the whole run of the static strategies simulated (B = 1, every phase's B*, the scenario's vector).

Phases are simulated in bins of ``--bin-s`` (a phase's overrides on its first bin only), so the JSON has
throughput over time; per phase the throughput, the ratio to the oracle and to B = 1, the thresholds at its
end; for the adaptive run its switches, per phase the settling time (first moment the phase's B*, else its
final vector, is in force and stays) and the switches after settling; and the issue's targets, each with its
verdict. Run it under the measurement lock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adaptive_bench_phases import (
    after_settling,
    phase_figures,
    phase_starts,
    settling,
    split_phases,
    thresholds_timeline,
)
from adaptive_bench_report import markdown, plot

DEFAULT_SCENARIOS = ("trsim/scenarios/adaptive-phases.yaml", "trsim/scenarios/adaptive-collapse.yaml")
OUT = Path("docs/bench-sim/adaptive/adaptive.json")
PLOT = Path("docs/bench-sim/adaptive/adaptive.png")
#: The issue's targets.
ORACLE_FLOOR = 0.97
B1_FLOOR = 0.99
RECOVERY_FLOOR = 0.90
SETTLE_S = 10.0


def targets(rows: dict[str, list[float]], collapse_phase: int | None) -> dict[str, Any]:
    """The issue's targets from per-phase tok/s of ``adaptive``, ``oracle``, ``b1`` and ``best_static``
    (overall tok/s as the last element of each list)."""
    ad, orc, b1, st = rows["adaptive"], rows["oracle"], rows["b1"], rows["best_static"]
    phases = range(len(ad) - 1)
    to_oracle = [ad[k] / orc[k] for k in phases]
    to_b1 = [ad[k] / b1[k] for k in phases]
    out: dict[str, Any] = {
        "oracle_every_phase": {"ratio": to_oracle, "floor": ORACLE_FLOOR, "met": min(to_oracle) >= ORACLE_FLOOR},
        "b1_every_phase": {"ratio": to_b1, "floor": B1_FLOOR, "met": min(to_b1) >= B1_FLOOR},
        "best_static_overall": {"ratio": ad[-1] / st[-1], "floor": 1.0, "met": ad[-1] >= st[-1]},
        "static_loss_to_oracle": 1 - st[-1] / orc[-1],
        "adaptive_recovers": (ad[-1] - st[-1]) / (orc[-1] - st[-1]) if orc[-1] > st[-1] else None,
    }
    if collapse_phase is not None:
        ratio = to_oracle[collapse_phase]
        out["collapse_recovery"] = {
            "phase": collapse_phase,
            "ratio": ratio,
            "floor": RECOVERY_FLOOR,
            "met": ratio >= RECOVERY_FLOOR,
        }
    return out


def run_scenario(path: Path, bin_s: float) -> dict[str, Any]:
    from trsim.adaptive import oracle_thresholds
    from trsim.driver import simulate
    from trsim.scenario import load_scenario, scenario_config

    spec = load_scenario(path)
    adaptive = scenario_config(spec, path.parent, adaptive=True)
    plain = replace(adaptive, adaptive=None)
    assert adaptive.adaptive is not None
    knobs = adaptive.adaptive.controller
    phases = list(plain.phases)
    started = time.perf_counter()
    bstar = oracle_thresholds(plain, phases, knobs)
    print(f"{path.name}: B* per phase {bstar} ({time.perf_counter() - started:.1f} s)", flush=True)
    ones = (1,) * plain.num_models
    strategies: dict[str, tuple[Any, list[Any]]] = {"adaptive": (adaptive, phases)}
    statics = {"b1": ones}
    for k, b in enumerate(bstar):
        if b not in statics.values():
            statics[f"static-{k}"] = b
    if plain.thresholds != ones and plain.thresholds not in statics.values():
        statics["scenario"] = plain.thresholds
    for name, vec in statics.items():
        strategies[name] = (plain.with_thresholds(vec), phases)
    strategies["oracle"] = (plain, [replace(p, thresholds=b) for p, b in zip(phases, bstar, strict=True)])
    runs: dict[str, Any] = {}
    for name, (config, phs) in strategies.items():
        bins, owner = split_phases(phs, bin_s)
        t0 = time.perf_counter()
        result = simulate(replace(config, phases=tuple(bins)))
        records = result.extra["phases"]
        switches = result.extra.get("switches", [])
        initial = list(bstar[0]) if name == "oracle" else list(config.thresholds)
        steps = switches
        if name == "oracle":  # each phase's B* from its start
            steps = [
                {"time_s": p["start_s"], "new": list(b)}
                for p, b in zip(phase_starts(records, owner), bstar[1:], strict=True)
            ]
        per_phase = phase_figures(records, owner)
        runs[name] = {
            "thresholds": None if name in ("adaptive", "oracle") else list(statics[name]),
            "throughput_tok_s": result.throughput_tok_s,
            "phases": per_phase,
            "bins": [
                {
                    "start_s": r["start_s"],
                    "end_s": r["end_s"],
                    "throughput_tok_s": r["throughput_tok_s"],
                    "thresholds": r["thresholds"],
                }
                for r in records
            ],
            "switches": [
                {
                    **{k: s[k] for k in ("time_s", "old", "new", "predicted_gain")},
                    "window_concurrency": s["inputs"]["concurrency"],
                }
                for s in switches
            ],
            "num_solves": result.extra.get("num_solves"),
            "timeline": thresholds_timeline(initial, steps, records[-1]["end_s"]),
            "wall_s": time.perf_counter() - t0,
        }
        print(
            f"  {name:10s} {result.throughput_tok_s:8.1f} tok/s  phases "
            + " ".join(f"{p['throughput_tok_s']:.1f}" for p in per_phase)
            + f"  ({runs[name]['wall_s']:.1f} s)",
            flush=True,
        )
    static_names = list(statics)
    best = max(static_names, key=lambda s: runs[s]["throughput_tok_s"])
    oracle = runs["oracle"]
    for run in runs.values():
        for p, o, b in zip(run["phases"], oracle["phases"], runs["b1"]["phases"], strict=True):
            p["to_oracle"] = p["throughput_tok_s"] / o["throughput_tok_s"]
            p["to_b1"] = p["throughput_tok_s"] / b["throughput_tok_s"]
        run["to_oracle"] = run["throughput_tok_s"] / oracle["throughput_tok_s"]

    def tok(name: str) -> list[float]:
        return [p["throughput_tok_s"] for p in runs[name]["phases"]] + [runs[name]["throughput_tok_s"]]

    collapse = None
    if "scenario" in statics:  # the phase where the scenario's own vector does worst against the oracle
        ratios = [p["to_oracle"] for p in runs["scenario"]["phases"]]
        collapse = ratios.index(min(ratios))
    ad_phases = runs["adaptive"]["phases"]
    settle = []
    for k, p in enumerate(ad_phases):
        before = list(adaptive.thresholds) if k == 0 else ad_phases[k - 1]["thresholds"]
        settle.append(
            {"phase": k, **settling(runs["adaptive"]["switches"], p["start_s"], p["end_s"], before, bstar[k])}
        )
    for s in settle:  # the phase's bins from the first one that starts settled, against the oracle's same bins
        since = ad_phases[s["phase"]]["start_s"] + s["settle_s"]
        s["after_settling_to_oracle"] = after_settling(
            runs["adaptive"]["bins"], oracle["bins"], since, ad_phases[s["phase"]]["end_s"]
        )
    goals = targets(
        {"adaptive": tok("adaptive"), "oracle": tok("oracle"), "b1": tok("b1"), "best_static": tok(best)}, collapse
    )
    if collapse is not None:
        goals["collapse_recovery"]["after_settling"] = settle[collapse]["after_settling_to_oracle"]
    # The first phase starts from nothing learned: settling there is the time to learn, not to follow a change.
    later = [s for s in settle if s["phase"] > 0]
    goals["settle_within_s"] = {
        "settle_s": [s["settle_s"] for s in later],
        "limit_s": SETTLE_S,
        "met": all(s["settle_s"] <= SETTLE_S for s in later),
    }
    goals["switches_after_settling"] = {
        "counts": [s["switches_after"] for s in settle],
        "limit": 1,
        "met": all(s["switches_after"] <= 1 for s in settle),
    }
    return {
        "scenario": str(path),
        "name": spec.name,
        "seed": spec.seed,
        "adaptive_knobs": spec.adaptive.model_dump(),
        "phases": [
            {"index": k, "duration_s": p.duration_s, "concurrency": p.concurrency, "P": p.P, "C": p.C}
            for k, p in enumerate(phases)
        ],
        "bstar": [list(b) for b in bstar],
        "best_static": best,
        "settling": settle,
        "targets": goals,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", action="append", type=Path, help="phase scenario (repeat) [the committed two]")
    parser.add_argument("--bin-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--plot", type=Path, help=f"where the run draws its plot [{PLOT}]")
    parser.add_argument(
        "--report", type=Path, help="print the tables of a written JSON (and redraw --plot if given); no run"
    )
    args = parser.parse_args()
    if args.report:
        done = json.loads(args.report.read_text())
        if args.plot is not None:  # a report never redraws the committed plot unasked
            plot(done, args.plot)
        print(markdown(done))
        return
    paths = args.scenario or [Path(p) for p in DEFAULT_SCENARIOS]
    started = time.perf_counter()
    doc = {
        "command": " ".join(["python benchmarks/adaptive_bench.py", *sys.argv[1:]]),
        "bin_s": args.bin_s,
        "scenarios": [run_scenario(p, args.bin_s) for p in paths],
    }
    doc["wall_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    figure = args.plot or PLOT
    plot(doc, figure)
    print(markdown(doc))
    print(f"wrote {args.out} and {figure}")


if __name__ == "__main__":
    main()
