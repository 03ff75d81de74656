"""The session hazard of docs/vllm-notes.md, pinned down: a streaming session leaking into later fresh requests.

Cause (docs/vllm-notes.md): vLLM 0.32's ``Scheduler._update_request_as_session`` extends the session's
``Request.prompt_token_ids`` in place, and ``Request`` keeps the list object it was given. In-process, that is the
caller's list, so a caller that reuses its prompt list (to build fresh prompts sharing the prefix) silently sends
the session's later chunks along. Prefix caching plays no part. StepEngine never hands vLLM a list it does not own.
"""

from __future__ import annotations

import time

import pytest

from tests.serve.engine_support import greedy_next, hf_model, model_dirs, sample_prompts, start_engine
from trserve.engine.types import StepItem

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", params=[True, False], ids=["prefix-caching", "no-prefix-caching"])
def engine(request: pytest.FixtureRequest):
    eng = start_engine(model_dirs()[1], enable_prefix_caching=request.param)
    yield eng
    eng.close()


def test_vllm_session_update_extends_the_callers_prompt_list(engine):
    """The root cause, in vLLM itself (if vLLM stops doing this, update docs/vllm-notes.md)."""
    from vllm import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    core = engine._link.core  # the raw EngineCore, bypassing the adapter's copies on purpose
    prompt = sample_prompts()[0]
    mine = list(prompt)

    def add(tokens: list[int]) -> None:
        params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False)
        request = EngineCoreRequest("raw", tokens, None, params, None, time.time(), None, None, None, resumable=True)
        core.add_request(*core.preprocess_add_request(request))
        outputs, _ = core.step()
        assert outputs[0].outputs[0].new_token_ids

    add(mine)
    add([5, 6])
    core.abort_requests(["raw"])
    core.step()
    assert len(mine) > len(prompt)  # the caller's list now carries the session's tokens


def test_steps_never_modify_the_callers_lists(engine):
    prompt = sample_prompts()[1]
    first, later = list(prompt), [42, 43]
    out = engine.step([StepItem("keep", first)])[0]
    engine.step([StepItem("keep", [out.token_id])])
    engine.step([StepItem("keep", later)])
    engine.step([StepItem("keep", [])])  # re-sample in place (the session is rebuilt)
    engine.release("keep")
    assert first == prompt and later == [42, 43]


def greedy_run(engine, prompts: dict[str, list[int]], num_tokens: int) -> dict[str, list[int]]:
    """Fresh requests decoded greedily together in this engine, then released."""
    outs: dict[str, list[int]] = {rid: [] for rid in prompts}
    feed = dict(prompts)
    for _ in range(num_tokens):
        results = engine.step([StepItem(rid, feed[rid]) for rid in prompts])
        for rid, tok in zip(prompts, results, strict=True):
            outs[rid].append(tok.token_id)
            feed[rid] = [tok.token_id]
    for rid in prompts:
        engine.release(rid)
    return outs


def test_fresh_requests_after_a_session_match_transformers(engine):
    prefix = sample_prompts()[2]  # one list object, reused for everything below as a careless caller would
    suffixes = {"f0": [13], "f1": [314, 253], "f2": [2]}

    def fresh_prompts() -> dict[str, list[int]]:
        return {rid: prefix + suffix for rid, suffix in suffixes.items()}

    before = greedy_run(engine, fresh_prompts(), 6)
    # a session on the shared prefix: decode, hand off (peer tokens appended), come back, decode on
    feed: list[int] = prefix
    for chunk in ([], [900, 901], [], [77]):
        tok = engine.step([StepItem("session", feed)])[0].token_id
        feed = [tok, *chunk]
    engine.release("session")
    after = greedy_run(engine, fresh_prompts(), 6)
    assert after == before
    model = hf_model(model_dirs()[1])
    for rid, prompt in fresh_prompts().items():
        seq = list(prompt)
        for tok in after[rid]:
            assert tok == greedy_next(model, seq)[0], rid
            seq.append(tok)
    assert engine.kv_usage() == 0.0
