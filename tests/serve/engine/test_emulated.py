"""``backend: emulated``: the latency sources, the engine's tokens and step times, the config's errors."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from tokenrouter.cli import app
from trserve.config import ServeConfig, load_config
from trserve.engine import emulated
from trserve.engine.emulated import EmulatedEngine, EmulatedLatency, wait_until
from trserve.engine.hash import HashEngine
from trserve.engine.types import StepItem
from trserve.model_config import EmulatedConfig

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "calibration" / "profiles" / "cpu-2core" / "small.json"
CONFIG = ROOT / "configs" / "emulated-r2r-a100.yaml"


def test_constant_latency_holds_for_every_batch_size():
    latency = EmulatedLatency.from_config(EmulatedConfig(latency_ms=6.0))
    assert [latency.step_s(b) for b in (1, 7, 64)] == [0.006] * 3


def test_latency_list_is_by_batch_size_from_one_and_keeps_its_last_value():
    latency = EmulatedLatency.from_config(EmulatedConfig(latency_ms=[6.0, 6.5, 7.0]))
    assert [latency.step_s(b) for b in (1, 2, 3, 4, 100)] == [0.006, 0.0065, 0.007, 0.007, 0.007]
    assert latency.table(4) == [0.006, 0.0065, 0.007, 0.007]


def write_profile(path, coefficients):
    fit = {"model": "quadratic", "coefficients": coefficients}
    path.write_text(json.dumps({"llm": "made-up", "machine": {"description": "written by a test"}, "fit": fit}))
    return path


def test_profile_latency_is_the_profiles_fit_with_context_and_extend_terms(tmp_path):
    # a + b * batch + c * context + d * extend + e * batch**2, coefficients chosen here.
    coefs = {"a": 0.02, "b": 0.001, "c": 1e-6, "d": 5e-4, "e": 1e-5}
    latency = EmulatedLatency.from_config(EmulatedConfig(profile=str(write_profile(tmp_path / "p.json", coefs))))
    assert latency.step_s(8, 800, 40) == pytest.approx(0.02 + 0.008 + 0.0008 + 0.02 + 0.00064)
    assert latency.step_s(8, 4000, 0) == pytest.approx(0.02 + 0.008 + 0.004 + 0.00064)
    assert latency.step_s(1, 0, 0) == pytest.approx(0.02 + 0.001 + 0.00001)
    # The engine feeds the model its batch's context (tokens held after the step) and extend tokens (fed beyond
    # one per request): a prefills 3 tokens (2 extend), b 1; context 3 + 1.
    engine = EmulatedEngine(0, latency)
    engine.start([StepItem("a", [5, 6, 7]), StepItem("b", [9])])
    assert engine.last_emulated_s == pytest.approx(0.02 + 2 * 0.001 + 4 * 1e-6 + 2 * 5e-4 + 4 * 1e-5)


def test_jitter_draws_from_the_profiles_spread_reproducibly():
    cfg = EmulatedConfig(profile=str(PROFILE), jitter=True)
    a, b = EmulatedLatency.from_config(cfg, seed=3), EmulatedLatency.from_config(cfg, seed=3)
    mean = a.mean_s(4, 100)
    draws = [a.step_s(4, 100) for _ in range(200)]
    assert draws == [b.step_s(4, 100) for _ in range(200)]
    assert len(set(draws)) > 100 and all(abs(d / mean - 1) <= a.jitter for d in draws)
    assert 0 < a.jitter < 0.5


def test_emulated_engine_writes_the_hash_engines_tokens():
    emulated, plain = EmulatedEngine(1, EmulatedLatency.by_batch_s(1e-4)), HashEngine(1)
    feeds = [[StepItem("a", [5, 6, 7]), StepItem("b", [9])], [StepItem("a", [300]), StepItem("b", [301, 302])]]
    for items in feeds:
        assert emulated.step(items) == plain.step(items)
    emulated.release("a")
    assert "a" not in emulated.kv


def test_step_takes_the_emulated_latency_of_its_batch():
    """Accuracy on the real clock is reported, not asserted (the machine is shared); the wait never ends before
    its deadline. The upper bound is checked on a scripted clock below."""
    engine = EmulatedEngine(0, EmulatedLatency.by_batch_s(0.002, 0.003))
    errors = []
    for k in range(40):
        items = [StepItem(f"r{i}", [k]) for i in range(1 + k % 2)]
        engine.step(items)
        assert engine.last_emulated_s == (0.002 if len(items) == 1 else 0.003)
        assert engine.last_actual_s >= engine.last_emulated_s
        errors.append(engine.last_actual_s - engine.last_emulated_s)
    print(f"emulated step error: median {statistics.median(errors) * 1e6:.0f} us, max {max(errors) * 1e6:.0f} us")


class ScriptedClock:
    """A clock for the wait: ``sleep`` overshoots by 0.1 ms (as ``time.sleep`` does) and costs no CPU; each
    ``perf_counter`` read while spinning costs 10 us of CPU."""

    OVERSHOOT_S, READ_S = 1e-4, 1e-5

    def __init__(self) -> None:
        self.now = self.cpu = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds + self.OVERSHOOT_S

    def perf_counter(self) -> float:
        self.now += self.READ_S
        self.cpu += self.READ_S
        return self.now

    def process_time(self) -> float:
        return self.cpu


def test_the_wait_ends_within_one_clock_read_of_the_emulated_latency_and_spins_only_its_tail(monkeypatch):
    clock = ScriptedClock()
    monkeypatch.setattr(emulated, "time", clock)
    engine = EmulatedEngine(0, EmulatedLatency.by_batch_s(0.002, 0.003))
    spins = []
    for k in range(6):
        engine.step([StepItem(f"r{i}", [k]) for i in range(1 + k % 2)])
        # The sleep stops SPIN_S (0.3 ms) early, more than its 0.1 ms overshoot; the spin reads to the deadline.
        assert engine.last_emulated_s <= engine.last_actual_s <= engine.last_emulated_s + 2 * clock.READ_S
        # CPU: the spin after the sleep's early stop, SPIN_S - OVERSHOOT_S = 0.2 ms, within a read or two.
        assert engine.last_wait_cpu_s == pytest.approx(emulated.SPIN_S - clock.OVERSHOOT_S, abs=3 * clock.READ_S)
        spins.append(engine.last_wait_cpu_s)
    assert engine.wait_cpu_s == pytest.approx(sum(spins))


def test_wait_until_returns_at_or_after_the_deadline():
    deadline = time.perf_counter() + 0.003
    wait_until(deadline)
    assert time.perf_counter() >= deadline


@pytest.mark.parametrize(
    ("emulated", "message"),
    [
        ({}, "exactly one of latency_ms and profile"),
        ({"latency_ms": 6.0, "profile": str(PROFILE)}, "exactly one of latency_ms and profile"),
        ({"latency_ms": -1.0}, "latency_ms must be positive"),
        ({"latency_ms": []}, "latency_ms must be positive"),
        ({"profile": "/no/such/profile.json"}, "no such file"),
        ({"latency_ms": 6.0, "jitter": True}, "jitter needs a profile"),
        ({"latency_ms": 6.0, "speed": 2}, "speed"),
    ],
)
def test_bad_emulated_settings_name_the_field(emulated, message):
    with pytest.raises(ValidationError, match=message):
        EmulatedConfig.model_validate(emulated)


def _config(backend: str, **model) -> dict:
    return {"backend": backend, "models": [{"name": "small", **model}]}


def test_emulated_backend_needs_emulated_settings_and_no_path():
    assert ServeConfig.model_validate(_config("emulated", emulated={"latency_ms": 6.0})).models[0].path is None
    with pytest.raises(ValidationError, match=r"models\.0\.emulated is required"):
        ServeConfig.model_validate(_config("emulated", path="/x"))
    with pytest.raises(ValidationError, match=r"models\.0\.path is required with backend: vllm"):
        ServeConfig.model_validate(_config("vllm"))
    with pytest.raises(ValidationError, match=r"models\.0\.emulated is only read with backend: emulated"):
        ServeConfig.model_validate(_config("hash", path="/x", emulated={"latency_ms": 6.0}))


def test_committed_r2r_config_has_the_papers_latencies():
    cfg = load_config(CONFIG)
    assert cfg.backend == "emulated"
    assert [m.emulated.latency_ms for m in cfg.models if m.emulated] == [6.0, 27.9]
    assert cfg.router.params["P"] == [[0.65, 0.35], [1.0, 0.0]]


def test_bad_emulated_config_is_one_line_on_the_command_line(tmp_path: Path):
    bad = yaml.safe_load(CONFIG.read_text())
    bad["models"][1]["emulated"] = {"latency_ms": 27.9, "profile": "x.json"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error")]
    assert "Traceback" not in result.output and len(errors) == 1, result.output
    assert "models.1.emulated" in errors[0] and "exactly one of latency_ms and profile" in errors[0]
