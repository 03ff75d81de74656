"""Each routing program on hand-built step results: exact destinations and keep flags."""

import math
import random

import numpy as np
import pytest

from tests.factories import make_step
from trcore import PROGRAMS, ConfigError, ProtocolError, check_signals
from trcore.programs import MLPRouter, entropy_from_top_logprobs, random_router
from trcore.programs.signals import EXTRA_FEATURES, confidence_features

VLLM_SIGNALS = {"token_ids", "top_logprobs"}


def dist(*probs):
    """Top-k logprobs over tokens 1, 2, ... with the given probabilities (the rest is tail mass)."""
    return {tok: math.log(p) for tok, p in enumerate(probs, start=1)}


def uniform(n):
    return dist(*[1.0 / n] * n)


# --- entropy ------------------------------------------------------------------------------------------------


def test_entropy_exact_for_a_complete_distribution():
    assert entropy_from_top_logprobs(uniform(4)) == pytest.approx(math.log(4))
    assert entropy_from_top_logprobs(dist(1.0)) == pytest.approx(0.0)


def test_entropy_lumps_the_tail_into_one_outcome():
    # top-1 = 0.5, tail 0.5 as one outcome -> ln 2, below the true entropy of 0.5 + ten tokens of 0.05
    assert entropy_from_top_logprobs(dist(0.5)) == pytest.approx(math.log(2))
    true = -(0.5 * math.log(0.5) + 10 * 0.05 * math.log(0.05))
    assert entropy_from_top_logprobs(dist(0.5)) < true


def test_confidence_features_row():
    row = confidence_features({7: math.log(0.6), 3: math.log(0.3)}, sampled=3, top_k=3)
    logprobs, (entropy, tail, margin, sampled_lp, is_top1) = row[:3], row[3:]
    assert logprobs == pytest.approx([math.log(0.6), math.log(0.3), -30.0])
    assert tail == pytest.approx(0.1) and margin == pytest.approx(0.3)
    assert sampled_lp == pytest.approx(math.log(0.3)) and is_top1 == 0.0
    assert entropy == pytest.approx(-(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 0.1 * math.log(0.1)))
    assert len(EXTRA_FEATURES) == 5


def test_confidence_features_ignore_a_sampled_token_outside_the_top_k():
    """vLLM adds the sampled token to the top-k when it is not among them; only the sampled fields change."""
    top = {7: math.log(0.6), 3: math.log(0.3)}
    plain = confidence_features(top, sampled=7, top_k=2)
    extended = confidence_features({**top, 9: math.log(0.01)}, sampled=9, top_k=2)
    assert extended[:-2] == pytest.approx(plain[:-2])
    assert extended[-2:] == pytest.approx([math.log(0.01), 0.0])


# --- rstitch ------------------------------------------------------------------------------------------------


def test_rstitch_small_model_drops_uncertain_tokens():
    slm = PROGRAMS.create("rstitch", 0, 2, tau=1.0)
    step = make_step([1, 1, 1], top_logprobs=[dist(0.95, 0.05), uniform(4), dist(0.5, 0.3, 0.2)])
    # entropies: 0.199, 1.386, 1.030 nats
    routing = slm.route(step)
    assert list(routing.destinations) == [0, 1, 1]
    assert list(routing.keep) == [True, False, False]


def test_rstitch_large_model_returns_when_confident_and_keeps_its_token():
    llm = PROGRAMS.create("rstitch", 1, 2, tau=1.0, tau_back=0.5)
    routing = llm.route(make_step([1, 1, 1], entropy=[0.4, 0.5, 2.0]))
    assert list(routing.destinations) == [0, 1, 1]  # strictly below tau_back returns
    assert all(routing.is_kept(k) for k in range(3))


def test_rstitch_prefers_exact_entropy_when_given():
    slm = PROGRAMS.create("rstitch", 0, 2, tau=1.0)
    step = make_step([1], top_logprobs=[uniform(4)], entropy=[0.1])
    assert list(slm.route(step).destinations) == [0]


def test_rstitch_at_threshold_stays():
    slm = PROGRAMS.create("rstitch", 0, 2, tau=math.log(4))
    assert list(slm.route(make_step([1], entropy=[math.log(4)])).destinations) == [0]


def test_rstitch_signals_and_config():
    check_signals(PROGRAMS.create("rstitch", 0, 2), VLLM_SIGNALS)
    with pytest.raises(ConfigError, match="top_logprobs"):
        check_signals(PROGRAMS.create("rstitch", 0, 2), {"token_ids"})
    check_signals(PROGRAMS.create("rstitch", 0, 2, signal="entropy"), {"token_ids", "entropy"})
    for params, field in [
        ({"tau": -1.0}, "rstitch.tau"),
        ({"tau_back": math.nan}, "rstitch.tau_back"),
        ({"signal": "logits"}, "rstitch.signal"),
    ]:
        with pytest.raises(ConfigError) as err:
            PROGRAMS.create("rstitch", 0, 2, **params)
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        PROGRAMS.create("rstitch", 0, 3)
    assert err.value.field == "num_models"


def test_missing_signal_at_route_time_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="top_logprobs"):
        PROGRAMS.create("rstitch", 0, 2).route(make_step([1]))


# --- learned routers (r2r, citer) ---------------------------------------------------------------------------


def margin_router(top_k=2, threshold=0.5, **kw):
    """A one-layer router: score = sigmoid(20 * (0.5 - margin)), i.e. above 0.5 exactly when margin < 0.5."""
    num_normalized = top_k + len(EXTRA_FEATURES) + kw.get("hidden_dim", 0)
    table = kw.get("token_table")
    weight = np.zeros((num_normalized + (0 if table is None else table.shape[1]), 1))
    weight[top_k + EXTRA_FEATURES.index("margin"), 0] = -20.0
    if table is not None:
        weight[num_normalized:, 0] = 40.0  # a token row of 1 forces the LLM
    return MLPRouter(
        layers=((weight, np.array([10.0])),),
        mean=np.zeros(num_normalized),
        std=np.ones(num_normalized),
        top_k=top_k,
        threshold=threshold,
        **kw,
    )


@pytest.mark.parametrize("name", ["r2r", "citer"])
def test_learned_router_sends_flagged_tokens_to_llm_and_drops_them(name):
    slm = PROGRAMS.create(name, 0, 2, router=margin_router())
    step = make_step([1, 1, 2], top_logprobs=[dist(0.9, 0.1), dist(0.5, 0.4), dist(0.6, 0.3)])
    routing = slm.route(step)  # margins 0.8, 0.1, 0.3
    assert list(routing.destinations) == [0, 1, 1]
    assert list(routing.keep) == [True, False, False]
    assert list(PROGRAMS.create(name, 0, 2, router=margin_router(), threshold=0.99).route(step).destinations) == [
        0,
        1,
        0,
    ]


@pytest.mark.parametrize("name", ["r2r", "citer", "colllm"])
def test_large_model_writes_one_token_and_hands_back(name):
    llm = PROGRAMS.create(name, 1, 2, router=margin_router())
    routing = llm.route(make_step([5, 6]))  # no signals needed on the LLM
    assert list(routing.destinations) == [0, 0] and routing.is_kept(0) and routing.is_kept(1)
    check_signals(llm, {"token_ids"})


def test_sampled_token_row_can_force_the_llm():
    table = np.zeros((10, 1))
    table[7, 0] = 1.0
    slm = PROGRAMS.create("r2r", 0, 2, router=margin_router(token_table=table))
    step = make_step([7, 3, 99], top_logprobs=[dist(0.9, 0.05)] * 3)  # confident; 99 is outside the table
    assert list(slm.route(step).destinations) == [1, 0, 0]


def test_hidden_state_router_requires_hidden():
    slm = PROGRAMS.create("r2r", 0, 2, router=margin_router(hidden_dim=3))
    with pytest.raises(ConfigError, match="hidden"):
        check_signals(slm, VLLM_SIGNALS)
    check_signals(slm, VLLM_SIGNALS | {"hidden"})
    step = make_step([1], top_logprobs=[dist(0.9, 0.1)], hidden=[[0.0, 1.0, 2.0]])
    assert list(slm.route(step).destinations) == [0]
    with pytest.raises(ProtocolError, match="hidden"):
        slm.route(make_step([1], top_logprobs=[dist(0.9, 0.1)]))


def test_router_round_trips_through_npz(tmp_path):
    router = random_router(np.random.default_rng(0), top_k=4, hidden_sizes=(8, 4), token_table=np.ones((5, 2)))
    router.save(tmp_path / "r.npz")
    loaded = MLPRouter.load(tmp_path / "r.npz")
    step = make_step([1, 4], top_logprobs=[dist(0.7, 0.2), dist(0.3, 0.3, 0.2)])
    assert loaded.scores(step) == pytest.approx(router.scores(step), abs=1e-3)  # weights stored as float32/16
    assert loaded.threshold == router.threshold and loaded.top_k == 4
    slm = PROGRAMS.create("citer", 0, 2, router=str(tmp_path / "r.npz"))
    assert slm.threshold == router.threshold


def test_router_file_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="no router weights"):
        PROGRAMS.create("r2r", 0, 2, router=str(tmp_path / "missing.npz"))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="cannot read"):
        PROGRAMS.create("citer", 0, 2, router=str(tmp_path / "bad.npz"))
    with pytest.raises(ConfigError) as err:
        PROGRAMS.create("r2r", 0, 2, router=margin_router(), threshold=1.5)
    assert err.value.field == "r2r.threshold"


# --- colllm -------------------------------------------------------------------------------------------------


def test_colllm_defers_when_doubt_exceeds_eta():
    slm = PROGRAMS.create("colllm", 0, 2, eta=0.3)
    step = make_step([1, 1, 1], top_logprobs=[dist(0.9, 0.1), dist(0.6, 0.4), dist(0.75, 0.2)])
    routing = slm.route(step)  # doubt 1 - p_top1 = 0.1, 0.4, 0.25
    assert list(routing.destinations) == [0, 1, 0]
    assert list(routing.keep) == [True, False, True]


def test_colllm_with_learned_deferral_head():
    slm = PROGRAMS.create("colllm", 0, 2, eta=0.5, router=margin_router())
    step = make_step([1, 1], top_logprobs=[dist(0.9, 0.1), dist(0.5, 0.4)])
    assert list(slm.route(step).destinations) == [0, 1]
    with pytest.raises(ConfigError) as err:
        PROGRAMS.create("colllm", 0, 2, eta=2.0)
    assert err.value.field == "colllm.eta"


# --- mixture ------------------------------------------------------------------------------------------------


def test_mixture_draws_models_by_weight():
    weights = [0.5, 0.3, 0.2]
    program = PROGRAMS.create("mixture", 2, 3, weights=weights, seed=7)
    dests = list(program.route(make_step([1] * 30_000)).destinations)
    for m, w in enumerate(weights):
        assert dests.count(m) / len(dests) == pytest.approx(w, abs=0.015)
    assert all(program.route(make_step([1, 2])).keep is None for _ in range(3))  # every token kept


def test_mixture_is_reproducible_and_streams_differ_per_model():
    def draws(model, seed):
        return list(
            PROGRAMS.create("mixture", model, 3, weights=[1, 1, 1], seed=seed).route(make_step([1] * 50)).destinations
        )

    assert draws(0, 1) == draws(0, 1)
    assert draws(0, 1) != draws(1, 1) and draws(0, 1) != draws(0, 2)
    shared = random.Random(3)
    program = PROGRAMS.create("mixture", 0, 2, weights=[0, 1], rng=shared)
    assert list(program.route(make_step([1] * 20)).destinations) == [1] * 20  # zero weight never drawn


@pytest.mark.parametrize("weights", [[1.0, 2.0], [1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [1.0, math.inf, 1.0]])
def test_mixture_rejects_bad_weights(weights):
    with pytest.raises(ConfigError) as err:
        PROGRAMS.create("mixture", 0, 3, weights=weights)
    assert err.value.field == "mixture.weights"


# --- registry -----------------------------------------------------------------------------------------------


def test_all_programs_are_registered_and_unknown_parameters_are_config_errors():
    assert {"rstitch", "r2r", "citer", "colllm", "mixture"} <= set(PROGRAMS.names())
    with pytest.raises(ConfigError) as err:
        PROGRAMS.create("rstitch", 0, 2, threshold=1.0)
    assert err.value.field == "router.rstitch"
