"""The baselines (``lockstep``, ``per-token``) serve the same routed answers as the routed server: the tokens of
the reference loop under the same per-token decisions, on the hash stand-in engine and on real vLLM engines."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.serve.engine_support import model_dirs, sample_prompts
from tests.serve.server.test_correctness import SCHEDULES, ask, next_token_for, reference
from tests.serve.server_fixtures import Served, server_config, start_served, wait_idle

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", params=["lockstep/hash", "per-token/hash", "lockstep/vllm", "per-token/vllm"])
def baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    mode, backend = request.param.split("/")
    dirs = model_dirs()
    config = {**server_config(dirs, backend=backend), "mode": mode}
    yield from start_served(tmp_path_factory.mktemp(f"{mode}-{backend}"), config, dirs)


def test_baseline_gives_the_reference_tokens(baseline: Served):
    prompts = sample_prompts()
    extras = [{"schedule": s} for s in SCHEDULES]
    extras += [{"handoff_prob": 0.3, "decision_key": f"k{k}"} for k in range(len(SCHEDULES), 8)]
    prompts = [[*prompts[k % len(prompts)], 300 + k] for k in range(len(extras))]  # as the routed tests
    answers = asyncio.run(ask(baseline, prompts, 12, extras))
    next_token = next_token_for(baseline)
    for k, (prompt, extra, answer) in enumerate(zip(prompts, extras, answers, strict=True)):
        expected = reference(next_token, prompt, f"k{k}", 12, extra.get("schedule", ()), extra.get("handoff_prob", 0))
        assert answer["choices"][0]["token_ids"] == expected, extra
    state = wait_idle(baseline)
    assert state["in_flight"] == 0 and all(w["num_resident"] == 0 for w in state["workers"])
