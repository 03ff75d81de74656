"""The phased closed loop (trserve/bench/phased.py): phase lookup and bounds by hand, a scenario's phases carried
forward, the per-phase summary of hand-made ``/metrics`` texts and records, and one run against a server on
emulated engines routed by each request's schedule (counts only, no timing assertions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serve.emulated_fixtures import emulated_config, emulated_url
from trcore.errors import ConfigError
from trserve import eventloop
from trserve.bench.client import RequestRecord, Workload
from trserve.bench.phased import (
    LoadPhase,
    phase_at,
    phase_starts,
    phases_from_scenario,
    run_phased_load,
    summarize_phases,
)
from trserve.bench.requests import Lengths
from trsim.scenario import load_scenario, scenario_phases
from trsim.scenario_phases import PhaseSpec

CHAT = ([[0.9, 0.1], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])
REASONING = ([[0.5, 0.5], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])


def test_phases_are_found_by_elapsed_time_and_the_last_one_holds_past_the_end():
    phases = [LoadPhase(2.0, 4), LoadPhase(3.0, 1), LoadPhase(1.0, 8)]
    assert phase_starts(phases) == [0.0, 2.0, 5.0, 6.0]
    assert [phase_at(phases, t) for t in (0.0, 1.99, 2.0, 4.9, 5.0, 5.99, 6.0, 60.0)] == [0, 0, 1, 1, 2, 2, 2, 2]
    with pytest.raises(ConfigError, match=r"phases\.concurrency"):
        LoadPhase(1.0, 0)
    with pytest.raises(ConfigError, match=r"phases\.duration_s"):
        LoadPhase(0.0, 2)


def test_a_scenarios_phases_carry_their_values_forward():
    spec = load_scenario("trsim/scenarios/adaptive-phases.yaml")  # N 64, 8, 64, 8; P chat, reasoning, -, chat
    phases = phases_from_scenario(spec.phases, 64, CHAT, scale_s=0.5)
    assert [(p.duration_s, p.concurrency) for p in phases] == [(30.0, 64), (30.0, 8), (30.0, 64), (30.0, 8)]
    assert [p.routing[0][0][1] for p in phases] == [0.1, 0.5, 0.5, 0.1]  # type: ignore[index]


def test_a_diurnal_day_becomes_load_phases_and_what_a_load_cannot_send_is_refused():
    spec = load_scenario("trsim/scenarios/adaptive-diurnal.yaml")  # no phases: a day of 12 phases of 20 s
    with pytest.raises(ConfigError, match=r"^phases: none given"):  # it ran no phase at all (max() of nothing)
        phases_from_scenario(spec.phases, 8, CHAT)
    phases = phases_from_scenario(scenario_phases(spec), 8, CHAT)
    assert len(phases) == 12 and phases[0].concurrency == 9 and max(p.concurrency for p in phases) == 63  # mid-phase
    lengths = PhaseSpec(duration_s=1.0, output_tokens=64)  # the bench preset's lengths ran instead
    with pytest.raises(ConfigError, match=r"phases\[1\]\.output_tokens"):
        phases_from_scenario([PhaseSpec(duration_s=1.0), lengths], 8, CHAT)
    with pytest.raises(ConfigError, match=r"phases\.duration_s"):
        LoadPhase(float("inf"), 2)


def metrics(small: float, large: float, thresholds: tuple[int, int] | None = None) -> str:
    text = f'tokenrouter_tokens_total{{model="small"}} {small}\ntokenrouter_tokens_total{{model="large"}} {large}\n'
    if thresholds is not None:
        text += "".join(f'tokenrouter_adaptive_thresholds{{model="{m}"}} {t}.0\n'
                        for m, t in zip(("small", "large"), thresholds, strict=True))  # fmt: skip
    return text


def test_each_phase_counts_the_tokens_committed_between_its_boundaries():
    phases = [LoadPhase(2.0, 2, CHAT), LoadPhase(4.0, 1)]
    texts = [metrics(0, 0), metrics(300, 100, (1, 1)), metrics(500, 700, (1, 5))]
    done = [(0, RequestRecord(sent=0.0, done=1.0)), (0, RequestRecord(sent=0.0, done=1.5)),
            (1, RequestRecord(sent=2.0, done=3.0)), (1, RequestRecord(sent=2.5, done=None)),
            (1, RequestRecord(sent=2.5, done=4.0, error="HTTP 503"))]  # fmt: skip
    out = summarize_phases(phases, phase_starts(phases), texts, done)
    assert [p["throughput_tok_s"] for p in out] == [400 / 2, 800 / 4]
    assert [(p["num_finished"], p["num_failed"]) for p in out] == [(2, 0), (1, 1)]
    assert [p["thresholds"] for p in out] == [[1, 1], [1, 5]] and out[0]["routing"]["P"] == CHAT[0]
    assert out[1]["routing"] is None and (out[1]["start_s"], out[1]["end_s"]) == (2.0, 6.0)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A routed server on emulated engines (1 / 2 ms steps) taking each request's own schedule."""
    yield from emulated_url(tmp_path_factory.mktemp("phased"), emulated_config({"program": "schedule", "params": {}}))


@pytest.mark.serve
def test_a_phased_run_serves_every_phase_and_fails_nothing(url: str) -> None:
    work = Workload(lengths=Lengths("short-reasoning", 0.03125, seed=2), routing=CHAT)
    # Client 1 idles through the 5.5 s phase, past uvicorn's 5 s keep-alive: it must not reuse a closed connection.
    phases = [LoadPhase(1.0, 2), LoadPhase(1.0, 6, REASONING), LoadPhase(5.5, 1), LoadPhase(1.0, 2)]
    out = eventloop.run(run_phased_load(url, phases, work))
    assert [p["concurrency"] for p in out] == [2, 6, 1, 2] and all(p["throughput_tok_s"] > 0 for p in out)
    assert sum(p["num_finished"] for p in out) > 0 and all(p["num_failed"] == 0 for p in out)
    assert all(p["thresholds"] is None for p in out)  # fixed thresholds: the adaptive gauge is absent


def test_a_phased_run_needs_a_length_preset(url: str) -> None:
    with pytest.raises(ConfigError, match="--lengths"):
        eventloop.run(run_phased_load(url, [LoadPhase(0.5, 1)], Workload()))
