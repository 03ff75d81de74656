"""The OpenAI-compatible HTTP API: the openai client, streaming, stop strings, and every error path.

Each test runs against the hash stand-in engine (seconds) and against real vLLM engines on CPU.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tests.serve.server_fixtures import API_KEY, MAX_BODY, MAX_MODEL_LEN, MODEL, Served, wait_idle

pytestmark = pytest.mark.serve


@pytest.fixture(params=["hash", "vllm"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


def oai(server: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)


def test_openai_client_completions_chat_and_streams(server: Served):
    client = oai(server)
    assert [m.id for m in client.models.list().data] == [MODEL]
    done = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 6
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=5, temperature=0
    )
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens <= 5
    pieces = [
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
        )
    ]
    assert "".join(pieces) == done.choices[0].text  # same greedy answer, streamed
    deltas = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(deltas)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (
        text == chat.choices[0].message.content and chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
    )


def test_seeded_sampling_is_repeatable(server: Served):
    client = oai(server)
    args = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "top_p": 0.9}
    first = client.completions.create(seed=7, **args).choices[0].text
    assert client.completions.create(seed=7, **args).choices[0].text == first


def test_stop_string_cuts_the_answer(server: Served):
    client = oai(server)
    full = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=24, temperature=0)
    text = full.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), "need a visible stop string"
    cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    wait_idle(server)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"model": "tokenrouter", "prompt": "hi", ', "malformed JSON"),
        ({"model": "no-such-model", "prompt": "hi"}, "unknown model"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": -3}, "max_tokens"),
        ({"model": MODEL, "prompt": [7] * (MAX_MODEL_LEN + 1), "max_tokens": 1}, "context limit"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": MAX_MODEL_LEN}, "context limit"),
        ({"model": MODEL, "prompt": "hi", "n": 2}, "n"),
        ({"model": MODEL}, "prompt"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": True}, "max_tokens"),
        ({"model": MODEL, "prompt": "hi", "stream": "yes"}, "stream"),
        ({"model": MODEL, "prompt": "hi", "stop": [""]}, "stop"),
    ],
)
def test_bad_requests_get_400_and_the_server_keeps_serving(server: Served, body, words):
    with server.client() as c:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        bad = c.post("/v1/completions", content=content, headers={"content-type": "application/json"})
        assert bad.status_code == 400, bad.text
        assert words in bad.json()["error"]["message"]
        good = c.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        assert good.status_code == 200


def test_api_key_is_required(server: Served):
    with httpx.Client(base_url=server.url) as c:
        assert c.get("/health").status_code == 200  # probes stay open
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            denied = c.post("/v1/completions", json={"model": MODEL, "prompt": "hi"}, headers=headers)
            assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
        assert c.get("/v1/models", headers={"x-api-key": API_KEY}).status_code == 200


def test_oversized_body_gets_413(server: Served):
    big = json.dumps({"model": MODEL, "prompt": "x" * (MAX_BODY + 10)}).encode()
    with server.client() as c:
        declared = c.post("/v1/completions", content=big, headers={"content-type": "application/json"})
        assert declared.status_code == 413

        def chunks():  # no Content-Length: the limit must hold while streaming the body in
            for k in range(0, len(big), 4096):
                yield big[k : k + 4096]

        streamed = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413 and "limit" in streamed.json()["error"]["message"]


def test_queue_over_limit_gets_429_with_retry_after(server: Served):
    async def burst() -> list[httpx.Response]:
        async with server.async_client() as c:
            body = {"model": MODEL, "prompt": "Count to ten:", "max_tokens": 24, "temperature": 0}
            return await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(160)))

    responses = asyncio.run(burst())
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}
    assert codes.count(429) > 0 and codes.count(200) >= 64
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and "waiting" in refused.json()["error"]["message"]
    wait_idle(server)


def test_client_disconnect_mid_stream_aborts_on_every_model(server: Served):
    body = {
        "model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 400, "stream": True, "ignore_eos": True,
        "routing_extra": {"handoff_prob": 0.5},  # resident (pending) on both models when the client leaves
    }  # fmt: skip
    with server.client() as c, c.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        got = [line for line, _ in zip(lines, range(12), strict=False) if line.startswith("data:")]
        assert len(got) >= 3
        busy = server.state()
        assert busy["in_flight"] == 1 and sum(w["num_resident"] for w in busy["workers"]) >= 1
    state = wait_idle(server)  # closing the connection must abort the request and free its KV everywhere
    assert state["in_flight"] == 0
    assert [(w["num_resident"], w["kv_usage"]) for w in state["workers"]] == [(0, 0.0)] * len(state["workers"])


def test_metrics_report_per_model_activity(server: Served):
    oai(server).completions.create(
        model=MODEL, prompt="hi", max_tokens=8, extra_body={"routing_extra": {"schedule": [[1, True]] * 3}}
    )
    with httpx.Client(base_url=server.url) as c:
        text = c.get("/metrics").text
    for name in ("tokenrouter_batch_size_bucket", "tokenrouter_step_seconds_count", "tokenrouter_queue_length",
                 "tokenrouter_handoffs_total", "tokenrouter_tokens_total", "tokenrouter_kv_usage"):  # fmt: skip
        for model in ("large", "small"):
            assert f'{name}{{model="{model}"' in text or f'{name}{{le="1.0",model="{model}"' in text, (name, model)
    handoffs = [line for line in text.splitlines() if line.startswith('tokenrouter_handoffs_total{model="large"}')]
    assert float(handoffs[0].split()[-1]) >= 1
