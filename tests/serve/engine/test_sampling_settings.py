"""Per-request sampling settings become vLLM ``SamplingParams`` per step: ``top_k``, ``logit_bias``, and
``min_tokens`` as a bias on the stop tokens while the sequence is shorter than prompt + min_tokens."""

from trserve.engine.core_link import SUPPRESS_BIAS, logit_bias_at, sampling_params

SETTINGS = {"temperature": 0.7, "top_k": 5, "logit_bias": {7: 2.5}, "suppress_until": 10, "suppress_token_ids": [2, 9]}


def test_stop_tokens_are_suppressed_only_before_min_tokens():
    assert logit_bias_at(SETTINGS, 9) == {7: 2.5, 2: SUPPRESS_BIAS, 9: SUPPRESS_BIAS}
    assert logit_bias_at(SETTINGS, 10) == {7: 2.5}
    assert logit_bias_at({"logit_bias": {7: 1.0}}, 3) == {7: 1.0}
    assert logit_bias_at({}, None) == {}


def test_params_carry_top_k_and_the_bias_of_this_position():
    early = sampling_params(SETTINGS, 0, "r#0", num_tokens=4)
    assert early.top_k == 5 and early.logit_bias == {7: 2.5, 2: -100.0, 9: -100.0}
    late = sampling_params(SETTINGS, 0, "r#1", num_tokens=12)
    assert late.logit_bias == {7: 2.5}
    readmit = sampling_params(SETTINGS, 0, "r#2", seed_offset=4)  # readmit and per-token: the offset is the length
    assert readmit.logit_bias == early.logit_bias
    assert sampling_params({}, 0, "r#3").logit_bias is None
