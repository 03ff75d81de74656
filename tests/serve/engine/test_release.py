"""StepEngine frees what it holds: release returns KV usage to baseline, aborts mid-way leak nothing, and a
step that cannot run fails cleanly without poisoning the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.serve.engine_support import model_dirs, sample_prompts, start_engine
from trserve.engine.types import EngineStepError, StepItem

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", params=["session", "readmit"])
def engine(request: pytest.FixtureRequest):
    eng = start_engine(model_dirs()[1], handoff=request.param, max_num_seqs=6)
    yield eng
    eng.close()


def decode(engine, feeds: dict[str, list[int]], num_steps: int) -> dict[str, list[int]]:
    """Step ``feeds`` greedily ``num_steps`` times; returns the sampled tokens per request (not released)."""
    outs: dict[str, list[int]] = {rid: [] for rid in feeds}
    for _ in range(num_steps):
        results = engine.step([StepItem(rid, feeds[rid]) for rid in feeds])
        for rid, tok in zip(feeds, results, strict=True):
            outs[rid].append(tok.token_id)
            feeds[rid] = [tok.token_id]
    return outs


def test_release_returns_kv_usage_to_baseline(engine):
    assert engine.kv_usage() == 0.0
    prompts = sample_prompts()
    decode(engine, {f"r{i}": list(p) for i, p in enumerate(prompts)}, 5)
    if engine.config.handoff == "session":
        assert engine.kv_usage() > 0.0  # parked sessions keep their KV
        assert engine.num_resident == len(prompts)
    for i in range(len(prompts)):
        engine.release(f"r{i}")
        engine.release(f"r{i}")  # twice is harmless
    engine.release("never-seen")
    assert engine.kv_usage() == 0.0
    assert engine.num_resident == 0


def test_aborting_mid_way_frees_it_and_the_others_continue_unchanged(engine):
    prompts = sample_prompts()
    alone = decode(engine, {"x0": list(prompts[0])}, 8)["x0"]
    engine.release("x0")
    feeds = {f"y{i}": list(p) for i, p in enumerate(prompts)}
    first = decode(engine, feeds, 3)
    engine.release("y1")
    engine.release("y2")
    rest = decode(engine, {rid: feeds[rid] for rid in ("y0", "y3")}, 5)
    assert first["y0"] + rest["y0"] == alone
    usage_with_two = engine.kv_usage()
    engine.release("y0")
    engine.release("y3")
    assert engine.kv_usage() == 0.0
    if engine.config.handoff == "session":
        assert usage_with_two > 0.0  # the two survivors kept their KV until released
    else:
        assert usage_with_two == 0.0  # readmit holds nothing between steps (cached prefixes count as free)


def test_bad_steps_fail_cleanly_and_leak_nothing(engine):
    prompt = sample_prompts()[0]
    expected = decode(engine, {"ref": list(prompt)}, 1)["ref"][0]  # the greedy first token, before any failure
    engine.release("ref")
    too_long = prompt * (engine.config.max_model_len // len(prompt) + 1)
    with pytest.raises(EngineStepError, match="max_model_len"):
        engine.step([StepItem("long", too_long)])
    with pytest.raises(EngineStepError, match="twice"):
        engine.step([StepItem("dup", prompt), StepItem("dup", prompt)])
    with pytest.raises(EngineStepError, match="token id"):
        engine.step([StepItem("oov", [engine.vocab_size])])
    with pytest.raises(EngineStepError, match="first visit"):
        engine.step([StepItem("empty", [])])
    with pytest.raises(EngineStepError, match="sampling"):
        engine.step([StepItem("fine", prompt), StepItem("bad", prompt, {"temperature": -1.0})])
    crowd = [StepItem(f"c{i}", prompt) for i in range(engine.config.max_num_seqs + 1)]
    with pytest.raises(EngineStepError, match="max_num_seqs"):
        engine.step(crowd)
    assert engine.kv_usage() == 0.0 and engine.num_resident == 0
    assert engine.step([StepItem("ok", prompt)])[0].token_id == expected
    engine.release("ok")


def kv_gib_for(model_dir: str, num_tokens: int) -> float:
    """KV cache size (GiB, float32) that holds about ``num_tokens`` tokens of this model."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    bytes_per_token = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * head_dim * 4
    return num_tokens * bytes_per_token / (1 << 30)


def test_engine_full_of_parked_sessions_raises_and_recovers():
    """When parked sessions hold the KV blocks, a new request cannot be scheduled: the step fails, the
    new request is released, and the resident one is untouched."""
    small = model_dirs()[1]
    probe = start_engine(small, kv_cache_gib=kv_gib_for(small, 640), max_model_len=512, warmup=False)
    try:
        length = probe.kv_capacity_tokens * 5 // 8
        filler, other = (sample_prompts()[0] * 512)[:length], (sample_prompts()[1] * 512)[:length]
        expected = probe.step([StepItem("ref", other)])[0].token_id  # alone, it fits
        probe.release("ref")
        probe.step([StepItem("hog", filler)])
        with pytest.raises(EngineStepError, match="scheduled nothing"):  # (no shared prefix to reuse)
            probe.step([StepItem("late", other)])
        assert probe.num_resident == 1
        probe.release("hog")
        assert probe.kv_usage() == 0.0
        assert probe.step([StepItem("late", other)])[0].token_id == expected
        probe.release("late")
    finally:
        probe.close()
