"""Self-tuning thresholds on the real serving stack (issue #27, deliverable 4): a phase scenario driven through
``tokenrouter serve`` on emulated engines with the scenario's latency tables, with ``batching.thresholds:
adaptive`` beside B = 1 and each phase's offline B* held all the time, and the simulator over the same phases.

    python benchmarks/adaptive_stack.py [--scenario trsim/scenarios/adaptive-phases.yaml] [--scale-s 0.25]
        [--out docs/bench-emulated/adaptive/adaptive-stack.json]

Each strategy runs on its own server (started, driven through every phase by the phased closed loop of
``trserve/bench/phased.py``, stopped), one after the other. Phases last the scenario's durations times
``--scale-s``; their concurrency and routing are the scenario's (routing walked into each request's schedule);
lengths are the bench's ``short-reasoning`` preset times ``--length-scale`` (the scenario's own lognormal has no
bench preset), in the simulator too. The real stack has no hook to switch thresholds at a phase boundary, so the
oracle is estimated per phase as the best static strategy measured in that phase (each phase's B* is among
them). The simulator runs the same scaled phases and lengths: adaptive, B = 1, each B* and the oracle proper.
With ``--backend vllm`` B* is solved on what ``thresholds: auto`` would solve on there: this machine's profiles
times the drift probe's factors (the probe ``auto`` runs first, on shared CPUs with both engines serving the first
phase's routing; ``--drift skip``: the profiles alone).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from trserve import eventloop
from trserve.bench.client import Workload
from trserve.bench.phased import PhasedRun, phase_starts, phases_from_scenario, run_phased
from trserve.bench.requests import Lengths
from trserve.bench.switch_tails import tails_after_switches
from trserve.config import ServeConfig
from trserve.server.defaults import DEFAULT_CONFIG
from trserve.server.process import ServerProcess
from trserve.server.thresholds import load_profile
from trsim.adaptive import oracle_thresholds, predicted_over_oracle
from trsim.driver import simulate
from trsim.profile import latency_from_profile
from trsim.scenario import load_scenario, scenario_config, scenario_phases


def latency_lists(config: Any, max_batch: int = 64) -> list[list[float]]:
    """Each model's step time (ms) for batch 1..``max_batch`` from the scenario's latency models."""
    return [[1000 * lat.predict(b, 0, 0) for b in range(1, max_batch + 1)] for lat in config.latency]


def serve_config(latency_ms: list[list[float]], names: list[str], thresholds: Any, knobs: dict[str, Any]) -> dict:
    """A routed server on emulated engines at ``latency_ms``, routed by each request's schedule."""
    pairs = zip(names, latency_ms, strict=True)
    models = [{"name": n, "max_num_seqs": 64, "emulated": {"latency_ms": ms}} for n, ms in pairs]
    batching: dict[str, Any] = {"thresholds": thresholds, "max_wait_ms": 20.0}
    if thresholds == "adaptive":
        batching["adaptive"] = knobs
    return {"mode": "routed", "backend": "emulated", "models": models, "router": {"program": "schedule",
            "params": {}}, "batching": batching, "server": {"max_active_requests": 64}}  # fmt: skip


def vllm_config(thresholds: Any, knobs: dict[str, Any]) -> dict:
    """The default local pair (real vLLM engines, one core each) routed by each request's schedule."""
    config = ServeConfig.model_validate(DEFAULT_CONFIG).model_dump(mode="json")
    config["router"] = {"program": "schedule", "params": {}}
    config["batching"] |= {"thresholds": thresholds, "max_wait_ms": 20.0}
    if thresholds == "adaptive":
        config["batching"]["adaptive"] |= knobs
    config["server"]["max_active_requests"] = 64
    return config


def profile_latencies() -> tuple[Any, ...]:
    """The local pair's calibration profiles of this machine, as the simulator's latency models (what offline
    ``auto`` solves on; the adaptive server itself reads none)."""
    cfg = ServeConfig.model_validate(DEFAULT_CONFIG)
    return tuple(latency_from_profile(load_profile(cfg, m)) for m in range(cfg.num_models))


def probed_latencies(routing: tuple[Any, Any], mode: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The calibrated inputs offline ``auto`` solves on for this traffic on the local pair: the profiles times
    the factors of the drift probe ``thresholds: auto`` runs first (``mode``: ``scale``, its default; on this
    machine's shared CPUs its default placement times the engines serving ``routing`` together, as they will be;
    ``skip``: the profiles as they are), and the probe's record."""
    from trserve.crossval.drift import serve_drift_probe
    from trserve.server.drift import DEFAULT_TOLERANCE, assess
    from trsim.latency import ScaledModel

    profiles = profile_latencies()
    if mode == "skip":
        return profiles, {"mode": "skip"}
    config = vllm_config(None, {})
    config["router"] = {"program": "markov", "params": {"P": routing[0], "C": routing[1], "seed": 0}}
    cfg = ServeConfig.model_validate(config)
    drift = assess(serve_drift_probe(cfg, profiles), mode, DEFAULT_TOLERANCE, [m.name for m in cfg.models])
    scaled = tuple(ScaledModel(m, f) for m, f in zip(profiles, drift.factors, strict=True))
    record = {"mode": mode, "placement": drift.placement, "ratios": drift.ratios, "factors": drift.factors,
              "num_steps": drift.num_steps}  # fmt: skip
    return scaled, record


def run_strategy(config: dict, phases: list, work: Workload, tmp: Path, name: str,
                 vectors: list | None = None) -> PhasedRun:  # fmt: skip
    """One strategy on its own server; ``vectors``: set each phase's vector at its start (the oracle)."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    server = ServerProcess(path)
    server.start(timeout_s=300)

    async def switch(client: Any, k: int) -> None:
        assert vectors is not None
        (await client.put("/admin/thresholds", json={"thresholds": list(vectors[k])})).raise_for_status()

    try:
        return eventloop.run(run_phased(server.url, phases, work, switch if vectors else None))
    finally:
        server.stop()


def adaptive_record(run: PhasedRun, phases: list, plain: Any, knobs: Any, bstar: list) -> dict[str, Any]:
    """What the controller did on the stack: switches on the run's clock, the vector at each phase's end against
    the oracle's (predicted on the phase's calibrated inputs; phase 0 is learnt from nothing), how long after each
    phase's start its final vector came into force, TPOT tails after each switch, and the controller's CPU."""
    after = run.adaptive[-1] if run.adaptive else {"switches": []}
    times, bounds = run.switch_times(), phase_starts(phases)
    switches = [{"time_s": t, "new": s["new"], "predicted_gain": s["predicted_gain"]}
                for t, s in zip(times, after["switches"], strict=True)]  # fmt: skip
    final = [p["thresholds"] for p in run.phases]
    settle = []  # from the phase's start to the last switch into its final vector (0: in force throughout)
    for k, vector in enumerate(final):
        mine = [s for s in switches if bounds[k] <= s["time_s"] < bounds[k + 1]]
        landed = [s["time_s"] - bounds[k] for s in mine if s["new"] == vector]
        settle.append(landed[-1] if landed else 0.0)
    return {
        "switches": switches, "final_thresholds": final, "oracle_thresholds": [list(b) for b in bstar],
        "predicted_over_oracle": predicted_over_oracle(plain, plain.phases, knobs, final),
        "settle_s": settle, "switches_per_phase": [sum(bounds[k] <= s["time_s"] < bounds[k + 1] for s in switches)
                                                   for k in range(len(phases))],
        "tpot_after_switches": tails_after_switches(phases, [r for _, r in run.requests], run.start, times),
        "controller_core_fraction": run.controller_core_fraction(),
        "solves_per_phase": [b["num_solves"] - a["num_solves"] for a, b in itertools.pairwise(run.adaptive)],
    }  # fmt: skip


def simulate_strategies(plain: Any, adaptive: Any, phases: tuple, bstar: list) -> dict[str, list[float]]:
    """The simulator's per-phase tok/s for every strategy over the scaled phases."""
    runs = {"adaptive": replace(adaptive, phases=phases), "b1": plain.with_thresholds((1,) * plain.num_models)}
    for b in dict.fromkeys(bstar):
        runs[f"static {list(b)}"] = plain.with_thresholds(b)
    runs["oracle"] = replace(plain, phases=tuple(replace(p, thresholds=b) for p, b in zip(phases, bstar, strict=True)))
    out = {}
    for name, config in runs.items():
        config = config if name in ("adaptive", "oracle") else replace(config, phases=phases)
        out[name] = [p["throughput_tok_s"] for p in simulate(config).extra["phases"]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="trsim/scenarios/adaptive-phases.yaml")
    parser.add_argument("--scale-s", type=float, default=0.25, help="phase durations times this")
    parser.add_argument(
        "--length-scale", type=float, default=0.1,
        help="short-reasoning lengths times this (0.1: at most 205 output tokens, so a schedule walked at a 50%% "
        "hand-off share stays within the server's 4,096-byte routing_extra)",
    )  # fmt: skip
    parser.add_argument("--out", default="docs/bench-emulated/adaptive/adaptive-stack.json")
    parser.add_argument(
        "--backend", choices=("emulated", "vllm"), default="emulated",
        help="emulated: engines at the scenario's latency tables; vllm: the local pair on this machine (B* and the "
        "simulator then use its calibration profiles instead of the scenario's tables)",
    )  # fmt: skip
    parser.add_argument(
        "--drift", choices=("scale", "skip"), default="scale",
        help="with --backend vllm: scale the profiles by the drift probe thresholds: auto runs first (its default), "
        "or skip it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not args.scale_s > 0 or not args.length_scale > 0:
        parser.error("--scale-s and --length-scale must be > 0")
    spec = load_scenario(args.scenario)
    tuned = scenario_config(spec, Path(args.scenario).parent, adaptive=True)
    drift: dict[str, Any] | None = None
    if args.backend == "vllm":
        first = tuned.phases[0]  # the traffic the server starts in
        routing = first.P or tuned.router.params["P"], first.C or tuned.router.params["C"]
        latency, drift = probed_latencies(routing, args.drift)
        tuned = replace(tuned, latency=latency)
    plain = replace(tuned, adaptive=None)
    assert tuned.adaptive is not None
    knobs = tuned.adaptive.controller
    bstar = oracle_thresholds(plain, plain.phases, knobs)
    lengths = Lengths("short-reasoning", args.length_scale)
    prompt, output = lengths.dists  # the simulator gets the stack's lengths, so the two compare
    plain = replace(plain, workload=replace(plain.workload, prompt_tokens=prompt, output_tokens=output))
    tuned = replace(tuned, workload=plain.workload)
    scaled = tuple(replace(p, duration_s=p.duration_s * args.scale_s) for p in plain.phases)
    routing = (plain.router.params["P"], plain.router.params["C"])
    phases = phases_from_scenario(scenario_phases(spec), plain.workload.concurrency, routing, args.scale_s)
    work = Workload(lengths=lengths, routing=routing)
    names = [m.name or f"model{i}" for i, m in enumerate(spec.models)]
    knob_dict = spec.adaptive.model_dump(exclude={"solve_delay_s", "seed"})  # the server's knobs of the same names
    strategies = {"adaptive": "adaptive", "b1": [1] * plain.num_models}
    strategies |= {f"static {list(b)}": list(b) for b in dict.fromkeys(bstar) if list(b) != [1] * plain.num_models}
    latency_source = "the scenario's tables" if args.backend == "emulated" else "calibration profiles of this machine"
    if drift is not None and drift["mode"] == "scale":
        latency_source += " times the drift probe's factors (as thresholds: auto scales them)"
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/adaptive_stack.py", *(argv or sys.argv[1:])]),
        "inputs": f"this run: {args.scenario} (routing, concurrency, controller knobs; latency: {latency_source}), "
                  f"phases x {args.scale_s}, bench lengths short-reasoning x {args.length_scale}; B* by the throughput "
                  f"model", "backend": args.backend,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1min_before": os.getloadavg()[0],
        "bstar": [list(b) for b in bstar], "phases": [{"duration_s": p.duration_s, "concurrency": p.concurrency,
                                                       "P": p.routing[0]} for p in phases], "stack": {},
    }  # fmt: skip
    if drift is not None:
        doc["drift_probe"] = drift
    if len(dict.fromkeys(bstar)) > 1:  # the oracle proper: each phase's B* set at its start
        strategies["oracle"] = list(bstar[0])
    with tempfile.TemporaryDirectory() as tmp:
        for name, thresholds in strategies.items():
            if args.backend == "vllm":
                config = vllm_config(thresholds, knob_dict)
            else:
                config = serve_config(latency_lists(plain), names, thresholds, knob_dict)
            vectors = bstar if name == "oracle" else None
            run = run_strategy(config, phases, work, Path(tmp), name.replace(" ", ""), vectors)
            doc["stack"][name] = run.phases
            if name == "oracle":
                for phase, b in zip(run.phases, bstar, strict=True):
                    phase["thresholds"] = list(b)
            if name == "adaptive":
                doc["adaptive"] = adaptive_record(run, phases, plain, knobs, bstar)
            print(name, [round(p["throughput_tok_s"], 1) for p in doc["stack"][name]], flush=True)
    doc["finished"], doc["load_1min_after"] = time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getloadavg()[0]
    doc["sim"] = simulate_strategies(plain, replace(tuned, phases=scaled), scaled, bstar)
    doc["summary"] = summarize(doc)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    return 0


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Per phase: the adaptive run's tok/s over the best static one measured there (the oracle's estimate) and
    over B = 1, on the stack and in the simulator (there over the oracle proper)."""
    stack = {n: [p["throughput_tok_s"] for p in runs] for n, runs in doc["stack"].items()}
    statics = [v for n, v in stack.items() if n not in ("adaptive", "oracle")]
    best = [max(col) for col in zip(*statics, strict=True)]
    oracle = stack.get("oracle", best)  # one phase, or one B* throughout: the oracle is that static run
    sim = doc["sim"]
    whole = {n: sum(v) / len(v) for n, v in stack.items()}  # the phases are equally long: the run's mean tok/s
    return {
        "stack_adaptive_over_oracle": [a / b for a, b in zip(stack["adaptive"], oracle, strict=True)],
        "stack_whole_run_tok_s": whole,
        "stack_adaptive_over_best_static_whole_run": whole["adaptive"] / max(sum(v) / len(v) for v in statics),
        "stack_adaptive_over_best_static": [a / b for a, b in zip(stack["adaptive"], best, strict=True)],
        "stack_adaptive_over_b1": [a / b for a, b in zip(stack["adaptive"], stack["b1"], strict=True)],
        "sim_adaptive_over_oracle": [a / b for a, b in zip(sim["adaptive"], sim["oracle"], strict=True)],
        "sim_adaptive_over_b1": [a / b for a, b in zip(sim["adaptive"], sim["b1"], strict=True)],
        "stack_over_sim": {n: [s / m for s, m in zip(v, sim[n], strict=True)] for n, v in stack.items() if n in sim},
        "stack_failed": {n: sum(p["num_failed"] for p in runs) for n, runs in doc["stack"].items()},
    }


if __name__ == "__main__":
    sys.exit(main())
