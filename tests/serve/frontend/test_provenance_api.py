"""Provenance in every answer: ``usage.tokens_per_model`` / ``usage.large_model_share`` and, with
``return_provenance``, the model of each output token (non-stream per choice, stream per chunk).

Expectations are independent of the server's bookkeeping: the ``schedule`` routing program decides which model
writes each token from the request's schedule or from its keyed random draws alone (not from the tokens), so
the reference below predicts the provenance on either backend; the per-model token counters of ``/metrics``
(counted from the subservers' step reports) must move by the answers' ``tokens_per_model``; and stop strings are
cut where the tokenizer's text of the answer's tokens first contains them.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serve.server_fixtures import API_KEY, MODEL, Served, wait_idle
from trcore.programs.schedule import random_decision

pytestmark = pytest.mark.serve

#: The fixtures' models in config order (model 0 is the entry model; the last is what ``large_model_share`` counts).
NAMES = ("large", "small")
#: (destination, kept) per step, wherever the request is; kept=False drops the token and the destination rewrites it.
SCHEDULES = [
    [[1, True], [1, True], [1, True], [0, True], [0, True], [1, True], [1, True], [0, True]],
    [[1, True], [1, True], [0, False], [1, True], [1, True], [1, False], [0, True], [1, True]],
    [[0, False], [1, True], [1, False], [0, True], [1, True], [1, True], [0, False], [0, True]],
]
PROMPTS = ("The capital of France is", "Write a short poem about the sea. The sea", "Question: what is 12 times 7?")


def expected_models(num_tokens: int, key: str, schedule: Any = (), prob: float = 0.0) -> list[str]:
    """Which model commits each output token under the schedule program (seed 0, entry model 0)."""
    models: list[str] = []
    model, index = 0, 0
    while len(models) < num_tokens:
        if index < len(schedule):
            dest, kept = schedule[index]
        else:
            dest, kept = random_decision(0, key, index, model, len(NAMES), prob), True
        index += 1
        if kept:
            models.append(NAMES[model])
        model = dest
    return models


def committed_tokens(server: Served, name: str = "tokenrouter_tokens") -> Counter[str]:
    """A per-model counter (``tokenrouter_tokens_total`` by default) per model, once nothing is in flight."""
    wait_idle(server)
    with server.client() as c:
        text = c.get("/metrics").text
    family = next((f for f in text_string_to_metric_families(text) if f.name == name), None)
    samples = family.samples if family is not None else []
    return Counter({s.labels["model"]: int(s.value) for s in samples if s.name.endswith("_total")})


def body(k: int, extra: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": PROMPTS[k % len(PROMPTS)], "max_tokens": 10, "temperature": 0,
            "ignore_eos": True, "return_provenance": True, "routing_extra": extra, **fields}  # fmt: skip


async def post_all(server: Served, bodies: list[dict[str, Any]], path: str = "/v1/completions") -> list[dict]:
    async with server.async_client() as client:
        responses = await asyncio.gather(*(client.post(path, json=b) for b in bodies))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    return [r.json() for r in responses]


def stream(server: Served, request: dict[str, Any], path: str = "/v1/completions") -> list[dict[str, Any]]:
    """The JSON chunks of a streamed answer (``[DONE]`` checked and dropped)."""
    with server.client() as c, c.stream("POST", path, json={**request, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        data = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def check_usage(answer: dict[str, Any], expected: list[str]) -> None:
    usage, choice = answer["usage"], answer["choices"][0]
    assert choice["provenance"] == expected
    assert usage["completion_tokens"] == len(expected) == len(choice.get("token_ids", expected))
    assert usage["tokens_per_model"] == {name: expected.count(name) for name in NAMES}
    assert usage["large_model_share"] == pytest.approx(expected.count(NAMES[-1]) / len(expected))


@pytest.fixture(params=["hash", "vllm"], scope="module")
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(f"{request.param}_server")
    return served


def test_provenance_and_usage_follow_the_routing_decisions(server: Served):
    """Fixed schedules (kept and dropped tokens) and random hand-offs, concurrently; on vLLM too."""
    randoms = 16 if server.backend == "hash" else 3
    extras = [{"schedule": s, "decision_key": f"s{k}"} for k, s in enumerate(SCHEDULES)]
    extras += [{"handoff_prob": 0.3, "decision_key": f"r{k}"} for k in range(randoms)]
    before, ends_before = committed_tokens(server), committed_tokens(server, "tokenrouter_finished")
    answers = asyncio.run(post_all(server, [body(k, e, return_token_ids=True) for k, e in enumerate(extras)]))
    expected = [expected_models(10, e["decision_key"], e.get("schedule", ()), e.get("handoff_prob", 0.0))
                for e in extras]  # fmt: skip
    assert {m for e in expected for m in e} == set(NAMES)  # both models write
    for answer, models in zip(answers, expected, strict=True):
        check_usage(answer, models)
    moved = committed_tokens(server) - before
    assert moved == sum((Counter(a["usage"]["tokens_per_model"]) for a in answers), Counter())
    # Each request's end is counted on the model that committed its last token (the bench's P and C read it).
    ends = committed_tokens(server, "tokenrouter_finished") - ends_before
    assert ends == Counter(models[-1] for models in expected)


def test_stream_chunks_concatenate_to_the_non_stream_answer(hash_server: Served):
    extra = {"handoff_prob": 0.4, "decision_key": "stream"}
    for path, chat in (("/v1/completions", False), ("/v1/chat/completions", True)):
        request = body(0, extra, max_tokens=16)
        if chat:
            request["messages"] = [{"role": "user", "content": request.pop("prompt")}]
        whole = asyncio.run(post_all(hash_server, [request], path))[0]
        check_usage(whole, expected_models(16, "stream", prob=0.4))
        chunks = stream(hash_server, {**request, "stream_options": {"include_usage": True}}, path)
        choices = [c["choices"][0] for c in chunks if c["choices"]]
        text = "".join(c["delta"]["content"] if chat else c["text"] for c in choices)
        whole_text = whole["choices"][0]["message"]["content"] if chat else whole["choices"][0]["text"]
        assert text == whole_text
        assert [m for c in choices for m in c["provenance"]] == whole["choices"][0]["provenance"]
        assert chunks[-1]["usage"] == whole["usage"] and chunks[-1]["choices"] == []
        plain = stream(hash_server, request, path)  # no include_usage: no usage chunk, as OpenAI's API does
        assert all("usage" not in c for c in plain)
        assert [m for c in plain for m in c["choices"][0]["provenance"]] == whole["choices"][0]["provenance"]


def test_a_stop_string_cuts_tokens_and_provenance_with_the_text(hash_server: Served):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(hash_server.model_dirs[0])
    extra = {"handoff_prob": 0.5, "decision_key": "stop"}
    full = asyncio.run(post_all(hash_server, [body(1, extra, max_tokens=24, return_token_ids=True)]))[0]["choices"][0]
    text, ids = full["text"], full["token_ids"]
    start = next(i for i in range(len(text) // 2, len(text) - 3) if text[i : i + 3].isalnum())
    stop = text[start : start + 3]
    k = next(n for n in range(1, len(ids) + 1) if stop in hf.decode(ids[:n], skip_special_tokens=True))
    assert k < len(ids), "the stop string must cut tokens"
    cut = asyncio.run(post_all(hash_server, [body(1, extra, max_tokens=24, return_token_ids=True, stop=[stop])]))[0]
    choice = cut["choices"][0]
    assert choice["text"] == text[: text.index(stop)] and choice["finish_reason"] == "stop"
    assert choice["token_ids"] == ids[:k]
    check_usage(cut, full["provenance"][:k])
    chunks = stream(hash_server, body(1, extra, max_tokens=24, stop=[stop]))
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    assert [m for c in chunks for m in c["choices"][0]["provenance"]] == choice["provenance"]
    wait_idle(hash_server)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"return_provenance": "yes"}, "return_provenance"),
        ({"return_provenance": 1}, "return_provenance"),
        ({"return_provenance": None}, "return_provenance"),
        ({"n": 2}, "n"),
        ({"echo": True}, "echo"),
        ({"logprobs": 1}, "logprobs"),
    ],
)
def test_bad_or_unsupported_companions_get_400_naming_the_field(hash_server: Served, fields, param):
    with hash_server.client() as c:
        response = c.post("/v1/completions", json={**body(0, {}), **fields})
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_neutral_companions_are_accepted(hash_server: Served):
    extra = {"schedule": SCHEDULES[1], "decision_key": "neutral"}
    answer = asyncio.run(post_all(hash_server, [body(2, extra, n=1, echo=False, logprobs=None, best_of=1)]))[0]
    check_usage(answer, expected_models(10, "neutral", SCHEDULES[1]))
    assert answer["choices"][0]["logprobs"] is None


def test_without_return_provenance_usage_still_counts_per_model(hash_server: Served):
    extra = {"schedule": SCHEDULES[0], "decision_key": "plain"}
    answer = asyncio.run(post_all(hash_server, [body(0, extra, return_provenance=False)]))[0]
    assert "provenance" not in answer["choices"][0]
    models = expected_models(10, "plain", SCHEDULES[0])
    assert answer["usage"]["tokens_per_model"] == {name: models.count(name) for name in NAMES}


def test_the_openai_client_keeps_the_extra_fields(hash_server: Served):
    client = openai.OpenAI(base_url=f"{hash_server.url}/v1", api_key=API_KEY, max_retries=0)
    extra = {"return_provenance": True, "ignore_eos": True,
             "routing_extra": {"schedule": SCHEDULES[2], "decision_key": "openai"}}  # fmt: skip
    expected = expected_models(10, "openai", SCHEDULES[2])
    counts = {name: expected.count(name) for name in NAMES}
    done = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=10, temperature=0, extra_body=extra)
    assert done.choices[0].provenance == expected  # type: ignore[attr-defined]
    assert done.usage is not None and done.usage.tokens_per_model == counts  # type: ignore[attr-defined]
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=10, temperature=0,
            stream=True, stream_options={"include_usage": True}, extra_body=extra,
        )
    )  # fmt: skip
    assert [m for c in chunks if c.choices for m in c.choices[0].provenance] == expected  # type: ignore[attr-defined]
    assert chunks[-1].usage is not None and chunks[-1].usage.tokens_per_model == counts  # type: ignore[attr-defined]
