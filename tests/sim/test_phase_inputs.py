"""Time-varying runs on input that used to crash, be ignored or be misreported: spans past the tick count, a phase's
lengths beside length pairs, a preset beside a lengths file, the concurrency of open loops and phased runs, and
sweeps of phased scenarios cut short by a default token count."""

import json
import re
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore import ConfigError
from trsim.adaptive import AdaptiveSimConfig
from trsim.driver import Simulation, simulate
from trsim.lengths import LengthDist, LengthPairs
from trsim.phases import Phase
from trsim.sweep import SweepPoint, run_point
from trsim.workload import WorkloadConfig

runner = CliRunner()
HEAD = (
    "name: t\nmodels:\n  - {latency: {model: constant, ms: 5}}\n  - {latency: {model: constant, ms: 20}}\n"
    "router: {program: markov, P: [[0.8, 0.2], [0.5, 0.5]], C: [[1, 0], [1, 0]]}\n"
)


def simulate_cli(tmp_path, body, *flags):
    path = tmp_path / "scenario.yaml"
    path.write_text(HEAD + body)
    return runner.invoke(app, ["simulate", "--scenario", str(path), *map(str, flags)])


def refused(result, message):
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize(
    ("body", "flags", "field"),
    [
        ("phases:\n  - {duration_s: 1e300}\n", (), "phases.0.duration_s"),
        ("diurnal: {period_s: 1e301, steps: 2, concurrency: {low: 1, high: 4}}\n", (), "diurnal.period_s"),
        ("adaptive: {tick_s: 1e300}\n", ("--thresholds", "adaptive", "--tokens", 500), "adaptive.tick_s"),
        ("run: {time_s: 1e300}\n", (), "time_s"),
    ],
)
def test_spans_beyond_the_tick_count_are_one_line_errors(tmp_path, body, flags, field):
    refused(simulate_cli(tmp_path, body, *flags), f"error: {field}")  # they overflowed to_ticks: a traceback


def test_spans_beyond_the_tick_count_are_refused_in_code(r2r):
    with pytest.raises(ConfigError, match=re.escape("phases[0].duration_s")):
        replace(r2r(), phases=(Phase(1e300),))
    for knob in ("tick_s", "solve_delay_s"):
        with pytest.raises(ConfigError, match=f"adaptive.{knob}"):
            AdaptiveSimConfig(**{knob: 1e300})
    with pytest.raises(ConfigError, match="time_s"):
        Simulation(r2r()).run(time_s=1e300)


def test_a_phase_lengths_beside_length_pairs_are_refused(r2r, tmp_path):
    pairs = replace(r2r().workload, pairs=LengthPairs(((16, 50),)))
    with pytest.raises(ConfigError, match=re.escape("phases[1].output_tokens")):  # the pairs' lengths ran instead
        replace(r2r(), workload=pairs, phases=(Phase(1.0), Phase(1.0, output_tokens=LengthDist("constant", value=4))))
    (tmp_path / "lengths.jsonl").write_text('{"num_prompt_tokens": 16, "num_output_tokens": 50}\n')
    body = "workload: {concurrency: 4, lengths_file: lengths.jsonl}\nphases:\n  - {duration_s: 1, output_tokens: 4}\n"
    refused(simulate_cli(tmp_path, body), "phases[0].output_tokens")


@pytest.mark.parametrize("field", ["prompt_tokens", "output_tokens"])
def test_workload_lengths_beside_a_lengths_file_are_refused(tmp_path, field):
    (tmp_path / "lengths.jsonl").write_text('{"num_prompt_tokens": 16, "num_output_tokens": 50}\n')
    body = f"workload: {{concurrency: 4, lengths_file: lengths.jsonl, {field}: 4}}\n"  # the pairs' lengths ran
    refused(simulate_cli(tmp_path, body, "--tokens", 500), f"workload.{field}")


def test_a_workload_preset_beside_a_lengths_file_is_refused(tmp_path):
    (tmp_path / "lengths.jsonl").write_text('{"num_prompt_tokens": 16, "num_output_tokens": 50}\n')
    body = "workload: {concurrency: 4, lengths_file: lengths.jsonl}\n"
    refused(simulate_cli(tmp_path, body, "--workload", "short-reasoning", "--tokens", 500), "--workload")
    assert simulate_cli(tmp_path, body, "--tokens", 500).exit_code == 0


def test_an_open_loop_phase_reports_no_concurrency(r2r):
    open_loop = WorkloadConfig(arrival="poisson", rate_per_s=20.0, output_tokens=LengthDist("constant", value=20))
    config = replace(r2r(), workload=open_loop, phases=(Phase(1.0), Phase(1.0, P=((0.5, 0.5), (1.0, 0.0)))))
    phases = simulate(config).extra["phases"]
    assert [p["concurrency"] for p in phases] == [None, None]  # it said 16, the closed loop's unused default
    assert all(p["committed_tokens"] > 0 for p in phases)


def test_a_run_whose_phases_set_the_concurrency_reports_it_per_phase(tmp_path):
    body = "workload: {concurrency: 8}\nphases:\n  - {duration_s: 1, concurrency: 2}\n  - {duration_s: 1}\n"
    result = simulate_cli(tmp_path, body, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["concurrency"] is None  # it said 8, which never ran
    assert [p["concurrency"] for p in summary["phases"]] == [2, 2]


def test_a_sweep_point_of_a_phased_scenario_runs_to_its_last_phase(r2r):
    phased = replace(r2r(), phases=(Phase(2.0), Phase(2.0, concurrency=2)))
    point = SweepPoint("phased", None, (1, 1))
    row = run_point(phased, point, None)
    assert row["simulated_s"] == pytest.approx(4.0) and row["cut_short"] is False
    cut = run_point(phased, point, 200)  # an explicit token count may cut it, and the row says so
    assert cut["cut_short"] is True and cut["simulated_s"] < 2.0


def test_a_warm_up_past_the_end_of_a_phased_run_is_refused(tmp_path):
    body = "workload: {concurrency: 4}\nphases:\n  - {duration_s: 0.5}\n"
    refused(simulate_cli(tmp_path, body, "--warmup-tokens", 10**7), "--warmup-tokens")  # it printed 0 tok/s
    assert simulate_cli(tmp_path, body, "--warmup-tokens", 10).exit_code == 0
