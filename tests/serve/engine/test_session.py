"""StepEngine against transformers: greedy decoding token by token, signals, and hand-offs driven by trcore.

Real vLLM on CPU in float32. The reference is transformers recomputing the whole sequence at every step (no KV
cache, no pending state), so any token the engine appends to the wrong context shows up as a different token.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.factories import ScriptedProgram, make_subserver
from tests.serve.engine_support import greedy_next, hf_model, model_dirs, sample_prompts, start_engine
from trcore import CLIENT, RequestSpec, StepResult, new_request_message
from trserve.engine.types import StepItem

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", params=["session", "readmit"])
def pair(request: pytest.FixtureRequest):
    """(large, small) StepEngines in one hand-off mode; stopped at the end of the module."""
    large_dir, small_dir = model_dirs()
    engines = [start_engine(large_dir, handoff=request.param), start_engine(small_dir, handoff=request.param)]
    yield engines
    for engine in engines:
        engine.close()


@pytest.fixture(scope="module")
def references():
    large_dir, small_dir = model_dirs()
    return [hf_model(large_dir), hf_model(small_dir)]


def test_stepping_one_token_at_a_time_is_greedy_decoding(pair, references):
    engine, model = pair[0], references[0]
    prompt = sample_prompts()[0]
    tokens, new = list(prompt), list(prompt)
    for _ in range(12):
        out = engine.step([StepItem("solo", new)])[0]
        expected, logprobs = greedy_next(model, tokens)
        assert out.token_id == expected
        probs = logprobs.exp()
        assert out.entropy == pytest.approx(float(-(probs * logprobs).sum()), abs=2e-3)
        top = torch.topk(logprobs, engine.config.top_logprobs)
        assert set(out.top_logprobs) == set(top.indices.tolist())
        for tok, lp in zip(top.indices.tolist(), top.values.tolist(), strict=True):
            assert out.top_logprobs[tok] == pytest.approx(lp, abs=2e-3)
        assert out.logprob == pytest.approx(float(logprobs[expected]), abs=2e-3)
        tokens.append(out.token_id)
        new = [out.token_id]
    engine.release("solo")


def test_batched_requests_match_their_own_greedy_continuations(pair, references):
    engine, model = pair[1], references[1]
    prompts = sample_prompts()
    seqs = {f"b{i}": list(p) for i, p in enumerate(prompts)}
    feed = {rid: list(seq) for rid, seq in seqs.items()}
    for step in range(6):
        # a different subset each step: parked requests must not run, stepped ones must continue exactly
        rids = [rid for k, rid in enumerate(seqs) if (k + step) % 3 != 0]
        outs = engine.step([StepItem(rid, feed[rid]) for rid in rids])
        for rid, out in zip(rids, outs, strict=True):
            assert out.token_id == greedy_next(model, seqs[rid])[0], (rid, step)
            seqs[rid].append(out.token_id)
            feed[rid] = [out.token_id]
    for rid in seqs:
        engine.release(rid)


SCRIPTS = {
    # (destination, kept) after each step on the model the request is on; requests start on the large model 0
    "stitch": [(1, True), (1, True), (1, True), (0, True), (0, True), (1, True), (1, True), (0, True)],
    "r2r": [(1, True), (1, True), (0, False), (1, True), (1, True), (1, False), (0, True), (1, True)],
    "citer": [(1, True), (0, True), (1, True), (0, True), (1, True), (0, True), (1, True), (1, True)],
    "redo": [(0, False), (1, True), (1, False), (0, True), (1, True), (1, True), (0, False), (0, True)],
}


def drive(engines, prompts, max_tokens: int):
    """Run the trcore subservers of both models on ``engines`` until every request finished; the routing
    decisions come from SCRIPTS. Returns the finished token sequences and both models' traces."""
    subs = [make_subserver(m, 2, threshold=1, program=ScriptedProgram(m, 2)) for m in range(2)]
    for m, sub in enumerate(subs):
        sub.program.script = _moves_on(m)
    for rid, prompt in zip(SCRIPTS, prompts, strict=False):
        spec = RequestSpec(rid, len(prompt), max_tokens)
        subs[0].receive(new_request_message(spec, prompt, 2), 0.0)
    finished: dict[str, list[int]] = {}
    now = 0.0
    while len(finished) < len(SCRIPTS):
        now += 1.0
        for m, sub in enumerate(subs):
            batch = sub.launch(now)
            if batch is None:
                continue
            items = [StepItem(r.request_id, r.token_ids[r.anchors[m] :], r.spec.sampling) for r in batch.requests]
            outs = engines[m].step(items)
            step = StepResult([o.token_id for o in outs], request_ids=batch.request_ids)
            for dest, msg in sub.complete(batch, step, now):
                if dest == CLIENT:
                    finished[msg.request_id] = [*prompts[list(SCRIPTS).index(msg.request_id)], *msg.token_ids]
                    engines[m].release(msg.request_id)
                elif msg.is_finished:
                    engines[dest].release(msg.request_id)
                else:
                    subs[dest].receive(msg, now)
    return finished, [sub.trace for sub in subs]


def _moves_on(model: int) -> dict[str, list[tuple[int, bool]]]:
    """Split each script into the decisions each model makes, in order (model 0 starts every request)."""
    moves: dict[str, list[tuple[int, bool]]] = {}
    for rid, script in SCRIPTS.items():
        here, mine = 0, []
        for dest, kept in script:
            if here == model:
                mine.append((dest, kept))
            here = dest
        moves[rid] = mine
    return moves


def replay(references, prompt: list[int], script, max_tokens: int) -> list[int]:
    """The reference loop: the same per-token decisions, every token recomputed from the whole sequence."""
    tokens, here, num_out = list(prompt), 0, 0
    for dest, kept in [*script, *[(None, True)] * max_tokens]:
        token = greedy_next(references[here], tokens)[0]
        if kept:
            tokens.append(token)
            num_out += 1
            if num_out == max_tokens:
                return tokens
        here = here if dest is None else dest
    raise AssertionError("script too short")


def test_fixed_handoff_schedule_gives_the_reference_loop_tokens(pair, references):
    prompts = sample_prompts()
    max_tokens = 10
    finished, _ = drive(pair, prompts, max_tokens)
    for rid, prompt in zip(SCRIPTS, prompts, strict=False):
        assert finished[rid] == replay(references, prompt, SCRIPTS[rid], max_tokens), rid
    assert max(engine.kv_usage() for engine in pair) == 0.0


def test_seeded_sampling_repeats_and_differs_from_greedy(pair):
    engine = pair[0]
    prompt = sample_prompts()[1]

    def run(rid: str, seed: int) -> list[int]:
        out, new = [], list(prompt)
        for _ in range(8):
            tok = engine.step([StepItem(rid, new, {"temperature": 1.0, "top_p": 0.95, "seed": seed})])[0]
            assert tok.entropy is not None and math.isfinite(tok.entropy)
            out.append(tok.token_id)
            new = [tok.token_id]
        engine.release(rid)
        return out

    first, again, other = run("s1", 7), run("s2", 7), run("s3", 8)
    assert first == again
    assert first != other
