"""Scenario files: the shipped examples run; malformed files fail with an error naming the field."""

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trcore import ConfigError
from trsim import simulate
from trsim.scenario import load_scenario, scenario_config

SCENARIOS = sorted((Path(__file__).parents[2] / "trsim" / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_run(path):
    config = scenario_config(load_scenario(path), path.parent)
    assert simulate(config, tokens=3000).committed_tokens >= 3000


def write(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


MODELS = "models: [{latency: {ms: 5}}, {latency: {ms: 20}}]\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (MODELS + "workload: {concurrency: 0}\n", "workload.concurrency"),
        (MODELS + "workload: {rate_per_s: -1}\n", "workload.rate_per_s"),
        (MODELS + "workload: {prompt_tokens: 0}\n", "workload.prompt_tokens"),
        (MODELS + "workload: {output_tokens: {dist: lognormal, median: -5}}\n", "workload.output_tokens"),
        (MODELS + "workload: {concurency: 3}\n", "workload.concurency"),
        (MODELS + "workload: {arrival: poisson, max_active: 0}\n", "workload.max_active"),
        ("models: [{latency: {ms: -5}}]\n", "models.0.latency.ms"),
        ("models: []\n", "models"),
    ],
)
def test_schema_errors_name_the_field(tmp_path, text, field):
    with pytest.raises(ValidationError) as err:
        load_scenario(write(tmp_path, text))
    assert ".".join(str(p) for p in err.value.errors()[0]["loc"]).startswith(field)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models: [{latency: {ms: 5}}\n", "invalid YAML at line 2"),
        ("- 1\n- 2\n", "must be a mapping"),
        (MODELS + "router: {program: nope}\n", "unknown routing program 'nope'"),
        ("models: [{latency: {model: cubic, coefficients: {a: 1}}}]\n", "unknown latency model 'cubic'"),
        (MODELS + "router: {program: markov, P: [[0.5, 0.6], [1, 0]]}\n", "router.P: row 0 sums to 1.1"),
        (MODELS + "workload: {preset: chat}\n", "unknown preset 'chat'"),
        (MODELS + "baseline: vllm\n", "unknown baseline 'vllm'"),
        (MODELS + "workload: {max_active: 4}\n", "a closed loop's is its concurrency"),
        (MODELS + "workload: {arrival: poisson, rate_per_s: 5, think_time_s: 3}\n", "one-turn sessions arriving"),
        (MODELS + "router: {program: trace}\n", "router.file"),
        ("models: [{latency: {model: table, ms: 5}}]\n", "batch_sizes and ms"),
    ],
)
def test_bad_values_are_config_errors(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        from trsim import Simulation

        Simulation(scenario_config(load_scenario(path), tmp_path))


def test_trace_replay_scenario(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"request_id": "a", "steps": [[0, 1, 0], [1, 0, 1], [0, 0, 1]], "num_prompt_tokens": 4}\n'
        '{"request_id": "b", "steps": [[0, 0, 1], [0, 0, 1]]}\n'
    )
    path = write(tmp_path, MODELS + "router: {program: trace, file: t.jsonl}\nworkload: {num_sessions: 4}\n")
    result = simulate(scenario_config(load_scenario(path), tmp_path))
    assert result.num_finished == 4 and result.committed_tokens == 2 * (2 + 2)
    assert result.handoffs_per_token == pytest.approx(2 * 2 / 8)  # a: SLM -> LLM -> SLM, twice


def test_a_users_program_by_import_path_drives_the_simulation(tmp_path, monkeypatch):
    (tmp_path / "sim_user_routing.py").write_text(
        "from trcore import RoutingProgram\nfrom trcore.step import Routing\n\n\n"
        "class Alternate(RoutingProgram):\n"
        "    def route(self, step):\n"
        "        return Routing([(self.model + 1) % self.num_models] * len(step.token_ids))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = write(tmp_path, MODELS + 'router: {program: "sim_user_routing:Alternate"}\n')
    result = simulate(scenario_config(load_scenario(path), tmp_path), tokens=2000)
    assert result.committed_tokens >= 2000 and result.handoffs_per_token == pytest.approx(1.0)
