"""The ``diurnal:`` scenario section: a cosine day of concurrency and routing cut into phases, worked by hand,
its refusals, the committed scenario, and a short day run with the adaptive controller."""

import math

import pytest
from pydantic import ValidationError

from trsim.driver import Simulation
from trsim.scenario import Scenario, load_scenario, scenario_config
from trsim.scenario_diurnal import DiurnalSpec, day_weight, diurnal_phases

from .test_adaptive_sim import scenario

LOW, HIGH = [[0.9, 0.1], [1.0, 0.0]], [[0.5, 0.5], [1.0, 0.0]]


def test_the_day_weight_is_zero_at_the_start_and_one_half_a_period_later():
    assert day_weight(0, 240) == 0 and day_weight(120, 240) == pytest.approx(1)
    assert day_weight(60, 240) == pytest.approx(0.5) and day_weight(0, 240, shift=0.5) == pytest.approx(1)


def test_four_phases_hold_the_values_at_their_middles():
    # Middles at 30, 90, 150, 210 s of a 240 s day: w = (1 - cos(pi/4)) / 2 = 0.1464, then 0.8536, 0.8536,
    # 0.1464; concurrency 8 + 56 w = 16.2, 55.8 -> 16, 56, 56, 16. Routing a quarter day later: the cosine's
    # argument is 1/8 - 1/4 = -1/8, then 1/8, 3/8, 5/8: w = 0.1464, 0.1464, 0.8536, 0.8536; P[0][1] = 0.1 + 0.4 w.
    spec = DiurnalSpec(period_s=240, steps=4, concurrency={"low": 8, "high": 64},
                       router={"P_low": LOW, "P_high": HIGH, "shift": 0.25})  # fmt: skip
    phases = diurnal_phases(spec)
    low_w, high_w = (1 - math.cos(math.pi / 4)) / 2, (1 + math.cos(math.pi / 4)) / 2
    assert [p.duration_s for p in phases] == [60.0] * 4 and [p.concurrency for p in phases] == [16, 56, 56, 16]
    handoff = [p.router.P[0][1] for p in phases]
    assert handoff == pytest.approx([0.1 + 0.4 * w for w in (low_w, low_w, high_w, high_w)])
    assert all(sum(row) == pytest.approx(1) for p in phases for row in p.router.P)  # a mixture stays stochastic
    assert all(p.router.C is None for p in phases)
    assert len(diurnal_phases(spec.model_copy(update={"periods": 3}))) == 12


@pytest.mark.parametrize(
    ("section", "message"),
    [({"period_s": 60}, "nothing else varies"),
     ({"period_s": 60, "router": {"P_low": LOW, "P_high": [[1.0]]}}, "same shape"),
     ({"period_s": 60, "router": {"P_low": LOW, "P_high": HIGH, "C_low": LOW}}, "both C_low and C_high"),
     ({"period_s": 60, "steps": 1, "concurrency": {"low": 1, "high": 2}}, "steps")],
)  # fmt: skip
def test_bad_diurnal_sections_are_refused_naming_the_problem(section, message):
    with pytest.raises(ValidationError, match=message):
        DiurnalSpec.model_validate(section)


def test_a_scenario_gives_phases_or_a_diurnal_day_not_both():
    data = scenario([{"duration_s": 3}], diurnal={"period_s": 60, "concurrency": {"low": 1, "high": 4}})
    with pytest.raises(ValidationError, match="phases or diurnal"):
        Scenario.model_validate(data)


def test_the_committed_day_expands_to_twelve_phases_over_four_minutes():
    config = scenario_config(load_scenario("trsim/scenarios/adaptive-diurnal.yaml"))
    assert len(config.phases) == 12 and sum(p.duration_s for p in config.phases) == pytest.approx(240)
    conc = [p.concurrency for p in config.phases]
    assert conc[:6] == sorted(conc[:6]) and conc[6:] == sorted(conc[6:], reverse=True) and max(conc) <= 64


def test_a_short_day_runs_with_the_controller_and_records_every_phase():
    data = scenario([], diurnal={"period_s": 12, "steps": 4, "concurrency": {"low": 2, "high": 8},
                                 "router": {"P_low": LOW, "P_high": HIGH}})  # fmt: skip
    data.pop("phases")
    result = Simulation(scenario_config(Scenario.model_validate(data), adaptive=True)).run()
    records = result.extra["phases"]
    assert [r["index"] for r in records] == [0, 1, 2, 3] and [r["concurrency"] for r in records] == [3, 7, 7, 3]
    assert sum(r["committed_tokens"] for r in records) == result.committed_tokens > 0


@pytest.mark.parametrize(
    ("router", "program", "field"),
    [({"P_low": LOW, "P_high": [[0.5, 0.6], [1.0, 0.0]]}, "markov", "diurnal.router.P_high"),
     ({"P_low": [[1.0]], "P_high": [[1.0]]}, "markov", "diurnal.router.P_low"),
     ({"P_low": LOW, "P_high": HIGH, "C_low": LOW, "C_high": [[1.0, 2.0], [1.0, 0.0]]}, "markov",
      "diurnal.router.C_high"),
     ({"P_low": LOW, "P_high": HIGH}, "rstitch", "diurnal.router")],
)  # fmt: skip
def test_a_bad_day_is_refused_naming_what_the_file_says(router, program, field):
    """The day expands to phases, but the file has no ``phases[0].router.P``: errors name the day's own keys."""
    from trcore import ConfigError

    data = scenario([], diurnal={"period_s": 12, "steps": 4, "router": router})
    data.pop("phases")
    data["router"] = {"program": program} if program != "markov" else data["router"]
    with pytest.raises(ConfigError) as error:
        scenario_config(Scenario.model_validate(data))
    assert error.value.field == field


@pytest.mark.parametrize(
    ("section", "field"),
    [({"diurnal": {"period_s": 12, "steps": 4, "concurrency": {"low": 2, "high": 8}}}, "diurnal.concurrency"),
     ({"phases": [{"duration_s": 3}, {"duration_s": 3, "concurrency": 4}]}, "phases[1].concurrency")],
)  # fmt: skip
def test_a_concurrency_an_open_loop_cannot_take_is_refused_naming_what_the_file_says(section, field):
    """An open loop has no concurrency to set: the refusal names the day's or the phase's key the file has."""
    from trcore import ConfigError

    data = {**scenario([]), **section}
    data["workload"] = {"arrival": "poisson", "rate_per_s": 5.0, "output_tokens": 64}
    if "diurnal" in section:
        data.pop("phases")
    with pytest.raises(ConfigError) as error:
        scenario_config(Scenario.model_validate(data))
    assert error.value.field == field
