"""Phases and ``--thresholds adaptive`` in the simulator: phase records, a closed loop that grows and shrinks,
the issue's collapse recovered by the controller on the simulated clock, hysteresis, the JSON interface."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore import ConfigError
from trcore.adaptive import AdaptiveConfig
from trsim.adaptive import AdaptiveSimConfig, predicted_over_oracle
from trsim.driver import Simulation
from trsim.scenario import Scenario, load_scenario, scenario_config

MODELS = [
    {"name": "slm", "latency": {"model": "table", "batch_sizes": [1, 64], "ms": [6.0, 18.0]}, "threshold": 8},
    {"name": "llm", "latency": {"model": "table", "batch_sizes": [1, 64], "ms": [27.9, 62.0]}},
]
ROOT = Path(__file__).resolve().parents[2]
COLLAPSE = {"P": [[0.85, 0.15], [0.5, 0.5]], "C": [[1.0, 1.0], [1.0, 1.0]]}


def scenario(phases, **extra):
    return {
        "models": MODELS,
        "router": {"program": "markov", "P": [[0.95, 0.05], [1.0, 0.0]], "C": [[1.0, 0.0], [1.0, 0.0]]},
        "workload": {"prompt_tokens": 16, "output_tokens": 64, "concurrency": 8},
        "adaptive": {"window_s": 4.0, "min_interval_s": 4.0, "solve_interval_s": 4.0, "method": "sampled"},
        "phases": phases,
        **extra,
    }


def run(data, adaptive=False):
    sim = Simulation(scenario_config(Scenario.model_validate(data), adaptive=adaptive))
    return sim, sim.run()


def test_phases_end_the_run_and_record_each_span():
    sim, result = run(scenario([{"duration_s": 3}, {"duration_s": 2, "concurrency": 4, "output_tokens": 32}]))
    phases = result.extra["phases"]
    assert [p["index"] for p in phases] == [0, 1]
    assert [(p["start_s"], p["end_s"]) for p in phases] == [(0.0, 3.0), (3.0, 5.0)]
    assert result.simulated_s == pytest.approx(5.0)
    assert sum(p["committed_tokens"] for p in phases) == result.committed_tokens
    assert phases[1]["concurrency"] == 4 and phases[1]["thresholds"] == [8, 1]
    assert sim.workload.num_live == 4 and sim.num_active <= 4  # the loop shrank as sessions ended


def test_a_closed_loop_grows_at_the_phase_start():
    sim, _ = run(scenario([{"duration_s": 1}, {"duration_s": 1, "concurrency": 12}]))
    assert sim.workload.num_live == 12 and sim.num_active == 12


def test_a_phase_router_changes_the_routing():
    phases = [{"duration_s": 3}, {"duration_s": 3, "router": COLLAPSE}]
    sim, result = run(scenario(phases))
    assert result.extra["phases"][1]["P"] == COLLAPSE["P"]
    assert all(type(sub.program).__name__ == "MarkovRouter" for sub in sim.subservers)
    assert sim.subservers[1].program._targets == [0, 1]  # the LLM now keeps requests half the time


def test_phase_router_needs_a_matrix_router():
    data = scenario([{"duration_s": 1, "router": COLLAPSE}])
    data["router"] = {"program": "regime", "P_easy": COLLAPSE["P"], "P_hard": COLLAPSE["P"]}
    with pytest.raises(ConfigError, match=r"phases\[0\]\.router"):
        scenario_config(Scenario.model_validate(data))


def test_adaptive_recovers_the_collapse():
    # (8, 1) is within 1% of the best vector at N = 16 with 5% of steps on the LLM, and collapses at N = 8; the
    # controller leaves it, and B = 1 holds through the collapse where the static (8, 1) falls below half.
    phases = [{"duration_s": 8, "concurrency": 16}, {"duration_s": 16, "concurrency": 8, "router": COLLAPSE}]
    _, static = run(scenario(phases))
    sim, adaptive = run(scenario(phases), adaptive=True)
    switches = adaptive.extra["switches"]
    assert switches and switches[0]["old"] == [8, 1]
    # Before the collapse (8, 1) is within 1% of B = 1, so its waits earn nothing: the controller goes back to no
    # delay as soon as the window is full (4 s), at a predicted gain within half of min_gain.
    (first, *_) = switches
    assert first["time_s"] == 4.0 and first["new"] == [1, 1] and abs(first["predicted_gain"]) < 0.01
    assert adaptive.extra["phases"][1]["thresholds"][0] <= 2 and sim.thresholds_in_force()[0] <= 2
    assert adaptive.extra["phases"][1]["throughput_tok_s"] > 1.8 * static.extra["phases"][1]["throughput_tok_s"]


def test_stationary_traffic_switches_at_most_once():
    data = scenario([{"duration_s": 30, "router": COLLAPSE}])
    data["models"] = [dict(m, threshold=1) for m in MODELS]
    _, result = run(data, adaptive=True)
    assert len(result.extra["switches"]) <= 1


def test_adaptive_follows_a_routing_change_within_two_ticks():
    # Chat traffic at N = 8 keeps B = 1; half the small model's steps handing off calls for delaying the large model.
    # The change test sees the new routing in the window's last second and the controller solves on it at once,
    # where a 4 s window would still mix both (with change_window_s 0 the switch comes at 15 s).
    phases = [{"duration_s": 10, "router": {"P": [[0.9, 0.1], [1.0, 0.0]]}},
              {"duration_s": 6, "router": {"P": [[0.5, 0.5], [1.0, 0.0]]}}]  # fmt: skip
    data = scenario(phases)
    data["models"] = [dict(m, threshold=1) for m in MODELS]
    data["workload"]["output_tokens"] = 256
    _, result = run(data, adaptive=True)
    (switch,) = result.extra["switches"]
    assert 10.0 < switch["time_s"] <= 12.0 and switch["new"][0] == 1 and switch["new"][1] > 1


def test_solve_delay_defers_the_switch():
    data = scenario([{"duration_s": 12, "router": COLLAPSE}])
    config = scenario_config(Scenario.model_validate(data), adaptive=True)
    delayed = replace(config.adaptive, solve_delay_s=100.0)  # never lands within the run
    sim = Simulation(replace(config, adaptive=delayed))
    result = sim.run()
    assert result.extra["switches"] and sim.thresholds_in_force() == (8, 1)


def test_flag_config_takes_adaptive_defaults():
    assert AdaptiveSimConfig().controller == AdaptiveConfig()


def test_cli_json_has_the_interface(tmp_path):
    path = tmp_path / "phases.yaml"
    path.write_text(yaml.safe_dump(scenario([{"duration_s": 4}, {"duration_s": 8, "router": COLLAPSE}])))
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(path), "--thresholds", "adaptive", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["throughput_tok_s"] > 0 and out["adaptive"] is True
    assert [set(p) >= {"throughput_tok_s", "thresholds"} for p in out["phases"]] == [True, True]
    assert all(set(s) >= {"time_s", "old", "new", "predicted_gain"} for s in out["switches"])
    assert out["switches"], "the collapse should be switched away from"


def test_a_final_vector_above_the_phase_concurrency_is_evaluated_as_the_policies_clamp_it():
    # adaptive_stack.py: a phase at N = 8 can end with the (1, 12) learnt at N = 64; the policies run it as (1, 8).
    path = ROOT / "trsim" / "scenarios" / "adaptive-phases.yaml"
    config = replace(scenario_config(load_scenario(path), path.parent), adaptive=None)
    knobs = AdaptiveConfig()
    assert [p.concurrency for p in config.phases] == [64, 8, 64, 8]
    wide = predicted_over_oracle(config, config.phases, knobs, [(1, 1), (1, 12), (1, 1), (1, 1)])
    assert wide == predicted_over_oracle(config, config.phases, knobs, [(1, 1), (1, 8), (1, 1), (1, 1)])
    assert 0 < wide[1] < 1


def test_a_phase_lists_the_table_entry_in_force_not_the_threshold_it_replaced():
    """The small model's table waits for 8 from 8 active requests on: its phases ran (8, 1), not the (1, 1) of its
    ``threshold`` (the collapse showed as a loss at 'thresholds [1, 1]')."""
    models = [{**MODELS[0], "threshold": 1, "table": {8: 8}}, MODELS[1]]
    phases = [{"duration_s": 2, "concurrency": 4}, {"duration_s": 2, "concurrency": 8}]
    sim, result = run({**scenario(phases), "models": models})
    assert [p["thresholds"] for p in result.extra["phases"]] == [[1, 1], [8, 1]]
    assert sim.thresholds_in_force() == (8, 1)


def test_with_replicas_the_controller_solves_one_pipelines_share():
    """Two copies of each model: 16 requests are two pipelines of 8, and the controller's window sees 8."""
    data = scenario([{"duration_s": 6}], workload={"prompt_tokens": 16, "output_tokens": 64, "concurrency": 16})
    config = scenario_config(Scenario.model_validate(data), adaptive=True)
    sim = Simulation(replace(config, replicas=(2, 2)))
    sim.run()
    assert sim.adaptive.controller.last_estimate.concurrency == pytest.approx(8.0, rel=0.05)
