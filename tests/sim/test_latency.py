"""Latency models: registry, evaluation on batches, fitting, calibration profiles."""

import random

import pytest

from trcore import Batch, ConfigError, RequestSpec
from trcore.request import Request
from trsim.fit import LatencySample, fit_latency_model
from trsim.latency import QuantizedModel, TableModel, latency_model_names, make_latency_model
from trsim.profile import LatencyProfile, latency_from_profile, load_profile, make_profile, save_profile


def batch(new_tokens, context):
    reqs = tuple(Request(RequestSpec(f"r{k}", 1, 10), [1] * c, [0, 0]) for k, c in enumerate(context))
    return Batch(0, reqs, tuple(new_tokens), tuple(context), 0.0)


def test_registry_lists_the_four_models_and_rejects_unknown_names():
    assert {"constant", "table", "linear", "quadratic"} <= set(latency_model_names())
    with pytest.raises(ConfigError, match="unknown latency model 'cubic'; valid: constant, linear"):
        make_latency_model("cubic", {})
    with pytest.raises(ConfigError, match="expected a, b, c"):
        make_latency_model("linear", {"a": 1.0})


def test_table_interpolates_and_holds_its_last_value():
    table = TableModel([1, 4, 8], [0.010, 0.016, 0.020])
    assert table(batch([1], [5])) == 0.010
    assert table.predict(2, 0, 0) == pytest.approx(0.012)
    assert table.predict(12, 0, 0) == 0.020  # as the throughput model: larger batches use the last entry


def test_prefill_costs_time_in_the_expressive_model():
    quad = make_latency_model("quadratic", {"a": 0.005, "b": 0.001, "c": 0.0, "d": 1e-5, "e": 0.0})
    decode = quad(batch([1, 1], [100, 100]))
    prefill = quad(batch([100, 1], [100, 100]))
    assert prefill - decode == pytest.approx(99 * 1e-5)


def test_quantized_model_rounds_to_whole_quanta():
    const = make_latency_model("constant", {"latency_s": 0.02791})
    assert QuantizedModel(const, 1e-3)(batch([1], [1])) == pytest.approx(0.028)
    assert QuantizedModel(const, 1.0)(batch([1], [1])) == 1.0  # never zero


def samples_from(truth, rng, noise=0.0):
    out = []
    for _ in range(200):
        b, ctx, ext = rng.randint(1, 32), rng.randint(100, 20000), rng.choice([0, 0, 0, rng.randint(1, 2000)])
        lat = truth.predict(b, ctx, ext) * (1 + noise * rng.uniform(-1, 1))
        out.append(LatencySample(b, ctx, ext, lat))
    return out


def linear_formula(b, ctx, ext):
    return 0.006 + 3e-4 * b + 2e-7 * ctx


def quadratic_formula(b, ctx, ext):
    return 0.006 + 3e-4 * b + 2e-7 * ctx + 4e-6 * ext + 1e-5 * b * b


@pytest.mark.parametrize(
    ("name", "formula", "coefs"),
    [
        ("linear", linear_formula, {"a": 0.006, "b": 3e-4, "c": 2e-7}),
        ("quadratic", quadratic_formula, {"a": 0.006, "b": 3e-4, "c": 2e-7, "d": 4e-6, "e": 1e-5}),
    ],
)
def test_least_squares_recovers_coefficients(name, formula, coefs):
    # Samples from the formula written above, not from the model's own predict.
    rng = random.Random(1)
    samples = []
    for _ in range(200):
        b, ctx, ext = rng.randint(1, 32), rng.randint(100, 20000), rng.choice([0, 0, 0, rng.randint(1, 2000)])
        samples.append(LatencySample(b, ctx, ext, formula(b, ctx, ext)))
    fit = fit_latency_model(name, samples)
    assert fit.mape < 1e-6
    for key, value in coefs.items():
        assert fit.coefficients[key] == pytest.approx(value, rel=1e-4)
    # The fitted model predicts the formula off the samples too: 8 requests, 4000 context, 300 extend tokens.
    assert fit.build().predict(8, 4000, 300) == pytest.approx(formula(8, 4000, 300), rel=1e-4)


def test_constant_and_table_fits_and_mape():
    samples = [LatencySample(b, 0, 0, 0.01 * b) for b in (1, 1, 2, 4)]
    assert fit_latency_model("table", samples).coefficients == {
        "batch_sizes": [1, 2, 4],
        "latency_s": [0.01, 0.02, 0.04],
    }
    const = fit_latency_model("constant", samples)
    assert const.coefficients["latency_s"] == pytest.approx(0.02)
    # 0.02 s against 0.01, 0.01, 0.02, 0.04 s: relative errors 1, 1, 0, 0.5
    assert const.mape == pytest.approx(0.625)


def test_underdetermined_fit_says_what_to_vary():
    samples = [LatencySample(4, 100, 0, 0.01)] * 5
    with pytest.raises(ConfigError, match="vary batch size"):
        fit_latency_model("linear", samples)


def test_profile_round_trip_picks_fits_and_refits(tmp_path):
    truth = make_latency_model("linear", {"a": 0.006, "b": 3e-4, "c": 2e-7})
    samples = samples_from(truth, random.Random(2), noise=0.01)
    profile = make_profile("test-llm", {"description": "unit test", "device": "cpu"}, samples, backend="none")
    assert profile.fit is not None and profile.fit.mape < 0.02 and len(profile.other_fits) == 1
    path = tmp_path / "profile.json"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile
    assert latency_from_profile(loaded).predict(8, 5000, 0) == pytest.approx(truth.predict(8, 5000, 0), rel=0.02)
    table = latency_from_profile(loaded, "table")  # not among the fits: fitted from the raw samples
    assert isinstance(table, TableModel)


def test_profile_schema_errors_name_the_field():
    bad = {
        "llm": "x",
        "machine": {"description": "m"},
        "samples": [{"batch_size": 0, "context_tokens": 1, "extend_tokens": 0, "latency_s": 0.1}],
    }
    with pytest.raises(Exception, match=r"samples\.0\.batch_size"):
        LatencyProfile.model_validate(bad)


def test_the_documented_example_profile_is_valid():
    import json
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "profile-schema.md").read_text()
    example = json.loads(re.search(r"```json\n(.*?)```", doc, re.S).group(1))
    profile = LatencyProfile.model_validate(example)
    assert latency_from_profile(profile).predict(1, 128, 0) == pytest.approx(0.05 + 0.0025 + 128e-7)
    assert latency_from_profile(profile, "linear").coefficients() == {"a": 0.052, "b": 0.0027, "c": 1.2e-7}
