"""``backend: emulated`` through the whole server in every mode: the tokens equal the hash reference loop, and
``/metrics`` reports the emulated step latency beside the measured one (accuracy is printed, not asserted)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.serve.server.test_correctness import reference
from tests.serve.server_fixtures import running_server
from trserve.bench.client import metric_delta, metric_values
from trserve.engine.hash import hash_next

pytestmark = pytest.mark.serve

MODES = ("routed", "lockstep", "per-token", "llm-only")
LATENCY_MS = {"large": 3.0, "small": 1.5}
PROMPTS = [[200 + 7 * k + i for i in range(5 + k)] for k in range(12)]
MAX_TOKENS = 10


def emulated_config(mode: str) -> dict:
    models = [{"name": name, "emulated": {"latency_ms": ms}, "max_num_seqs": 16} for name, ms in LATENCY_MS.items()]
    if mode == "llm-only":
        models = models[:1]
    return {
        "mode": "routed" if mode == "llm-only" else mode,
        "backend": "emulated",
        "models": models,
        "router": {"program": "schedule", "params": {"handoff_prob": 0.0, "seed": 0}},
        "batching": {"thresholds": [1] * len(models), "max_wait_ms": 20.0},
        "server": {"max_active_requests": 16},
    }


@pytest.fixture(scope="module", params=MODES)
def emulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    path = tmp_path_factory.mktemp("emulated") / "serve.yaml"
    path.write_text(yaml.safe_dump(emulated_config(request.param)))
    with running_server(path, timeout_s=300) as process:
        yield request.param, process.url


async def ask(url: str, prob: float) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(k: int) -> dict:
            body = {"model": "tokenrouter", "prompt": PROMPTS[k], "max_tokens": MAX_TOKENS, "temperature": 0,
                    "ignore_eos": True, "return_token_ids": True,
                    "routing_extra": {"handoff_prob": prob, "decision_key": f"k{k}"}}  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        return await asyncio.gather(*(one(k) for k in range(len(PROMPTS))))


def test_every_mode_serves_the_hash_reference_tokens(emulated: tuple[str, str]):
    mode, url = emulated
    prob = 0.0 if mode == "llm-only" else 0.3
    answers = asyncio.run(ask(url, prob))
    for k, answer in enumerate(answers):
        expected = reference(lambda m, seq: hash_next(m, seq).token_id, PROMPTS[k], f"k{k}", MAX_TOKENS, prob=prob)
        assert answer["choices"][0]["token_ids"] == expected, (mode, k)


def test_metrics_report_emulated_beside_measured_step_time(emulated: tuple[str, str]):
    mode, url = emulated
    if mode == "per-token":
        pytest.skip("per-token serving sends no step reports (each token is a request of its own)")
    asyncio.run(ask(url, 0.0))
    text = httpx.get(url + "/metrics").text
    steps = metric_values(text, "tokenrouter_steps_total")
    measured = metric_values(text, "tokenrouter_step_seconds_sum")
    given = metric_values(text, "tokenrouter_emulated_step_seconds_total")
    errors = metric_values(text, "tokenrouter_emulated_step_error_seconds_count")
    assert steps and set(given) == set(steps) and errors == steps
    for model, count in steps.items():
        assert given[model] == pytest.approx(count * LATENCY_MS[model] / 1000)
        assert measured[model] >= given[model]  # a wait never ends before its deadline
        mean_error_us = (measured[model] - given[model]) / count * 1e6
        print(f"{mode} {model}: {count:.0f} steps of {LATENCY_MS[model]} ms, mean error {mean_error_us:.0f} us")
    assert "tokenrouter_emulated_wait_cpu_seconds_total" in text


@pytest.mark.parametrize("emulated", ["routed"], indirect=True)  # only routed subservers hand requests over
def test_metrics_report_handoff_transit(emulated: tuple[str, str]):
    """Routed, with hand-offs both ways: each model counts the hand-off messages it received and their transit."""
    _, url = emulated
    asyncio.run(ask(url, 0.3))
    text = httpx.get(url + "/metrics").text
    sent = metric_values(text, "tokenrouter_handoffs_total")
    received = metric_values(text, "tokenrouter_handoffs_received_total")
    transit = metric_values(text, "tokenrouter_handoff_transit_seconds_total")
    assert set(received) == set(sent) == set(LATENCY_MS) and all(sent.values())
    for model, count in received.items():
        assert count > 0 and 0.0 < transit[model] / count < 1.0, (model, count, transit[model])
        late = metric_values(text, "tokenrouter_handoffs_late_total")[model]
        assert 0 <= late <= count
        mean_us = 1e6 * transit[model] / count
        print(f"{model}: {count:.0f} hand-off messages, mean transit {mean_us:.0f} us, {late:.0f} late")


@pytest.mark.parametrize("emulated", ["routed"], indirect=True)
def test_metrics_report_host_gaps_between_back_to_back_steps(emulated: tuple[str, str]):
    """Twelve requests at once on the entry model (no hand-offs): its steps run back to back, and the loop's time
    between them is counted for those steps only (not for a step after an idle loop)."""
    _, url = emulated
    entry = next(iter(LATENCY_MS))  # model 0
    asyncio.run(ask(url, 0.0))  # the loop has stepped before it idles
    before = httpx.get(url + "/metrics").text
    time.sleep(2.0)  # setup, not a check: the loop idles 2 s before the burst
    started = time.monotonic()
    asyncio.run(ask(url, 0.0))
    burst_s = time.monotonic() - started
    after = httpx.get(url + "/metrics").text
    gaps = metric_delta(after, before, "tokenrouter_host_gap_seconds_count").get(entry, 0.0)
    gap_s = metric_delta(after, before, "tokenrouter_host_gap_seconds_sum").get(entry, 0.0)
    steps = metric_delta(after, before, "tokenrouter_steps_total")[entry]
    step_s = metric_delta(after, before, "tokenrouter_step_seconds_sum")[entry]
    assert 0 < gaps < steps  # the first step of the burst followed an idle loop
    # Gaps and steps are disjoint stretches of the burst, so together they fit in it; a gap that counted the
    # idle wait before the burst (2 s) would not.
    assert gap_s + step_s <= burst_s, (gap_s, step_s, burst_s)
    mean_us = 1e6 * gap_s / gaps
    print(f"{entry}: {gaps:.0f} host gaps over {steps:.0f} steps, mean {mean_us:.0f} us")
