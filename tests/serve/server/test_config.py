"""Serve config validation, placement and threshold resolution (no processes)."""

import re

import pytest
import yaml
from pydantic import ValidationError

from trcore.errors import ConfigError
from trserve.config import ServeConfig, dump_config, load_config
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.placement import merge, place_models
from trserve.runtime.runspec import RunSpec, resolve_model_path
from trserve.server.defaults import default_config
from trserve.server.thresholds import load_profile, resolve_thresholds

TWO = [{"name": "small", "path": "/x"}, {"name": "large", "path": "/y"}]


def make(**kw):
    return ServeConfig.model_validate({"models": TWO, **kw})


def test_default_config_is_the_local_pair_with_rstitch():
    cfg = default_config()
    assert [m.path for m in cfg.models] == ["prepared:small", "prepared:large"]
    assert cfg.router.program == "rstitch" and cfg.server.host == "127.0.0.1"


def test_yaml_round_trip(tmp_path):
    cfg = make(batching={"thresholds": [2, 1], "tables": [{4: 3}, {}]})
    path = tmp_path / "c.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"models": [TWO[0], TWO[0]]}, "unique"),
        ({"entry_model": 2}, "entry_model"),
        ({"batching": {"thresholds": [1]}}, "one entry per model"),
        ({"models": [{**TWO[0], "placement": {"cpus": [0]}}, {**TWO[1], "placement": {"cpus": [0, 1]}}]}, "disjoint"),
        ({"mode": "sideways"}, "mode"),
        ({"server": {"port": -1}}, "port"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_configs_name_the_problem(override, words):
    with pytest.raises(ValidationError) as info:
        make(**override)
    assert words in str(info.value)


def test_bad_yaml_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("models: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_prepared_model_missing_names_the_prepare_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENROUTER_DATA_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="tokenrouter models prepare"):
        resolve_model_path("prepared:small")
    with pytest.raises(ConfigError, match=r"no config\.json"):
        resolve_model_path(str(tmp_path))


def test_cpu_placement_splits_free_cores_disjointly():
    cfg = make()
    placements = place_models(list(cfg.models), cpus=[0, 1, 2, 3])
    assert [p.cpus for p in placements] == [(0, 1), (2, 3)]
    env = placements[1].environment()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "2,3" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert merge(placements).cpus == (0, 1, 2, 3)


def test_explicit_cores_and_gpus():
    models = [
        {**TWO[0], "placement": {"cpus": [3]}},
        {**TWO[1], "placement": {"gpus": [0, 1], "tensor_parallel_size": 2}},
    ]
    placements = place_models(list(make(models=models).models), cpus=[0, 1, 2, 3])
    assert placements[0].cpus == (3,) and placements[1].cpus == (0, 1, 2)
    assert placements[1].environment()["CUDA_VISIBLE_DEVICES"] == "0,1"
    with pytest.raises(ConfigError, match="not available"):
        place_models(list(make(models=models).models), cpus=[0, 1])


def test_thresholds_default_given_and_checked():
    assert resolve_thresholds(make()) == [1, 1]
    assert resolve_thresholds(make(batching={"thresholds": [3, 2]})) == [3, 2]
    with pytest.raises(ConfigError, match="max_num_seqs"):
        resolve_thresholds(make(batching={"thresholds": [100, 1]}))


def test_auto_thresholds_without_profile_names_calibrate(tmp_path):
    cfg = make(batching={"thresholds": "auto", "auto": {"calibration_dir": str(tmp_path)}})
    with pytest.raises(ConfigError, match="tokenrouter calibrate"):
        resolve_thresholds(cfg)
    with pytest.raises(ConfigError, match="tokenrouter calibrate"):
        load_profile(cfg, 0)


def test_auto_thresholds_on_emulated_engines_solve_their_own_latencies(tmp_path):
    """Emulated engines given latency_ms step as the config says: auto solves those, probing nothing. It read the
    profiles named like the models instead (the CPU pair's `small` and `large` for the R2R config, scaled by a
    drift probe: [1, 1], where the config's 6.0 / 27.9 ms give (2, 10), 7% more), or refused without them."""

    def probe(cfg, models):
        raise AssertionError("an emulated engine needs no drift probe")

    emulated = [{"name": n, "emulated": {"latency_ms": ms}} for n, ms in (("small", 6.0), ("large", 27.9))]
    routing = {"program": "markov", "params": {"P": [[0.65, 0.35], [1, 0]], "C": [[1, 0], [1, 0]]}}
    auto = {"thresholds": "auto", "auto": {"calibration_dir": str(tmp_path)}}
    cfg = ServeConfig.model_validate({"backend": "emulated", "models": emulated, "router": routing, "batching": auto})
    said: list[str] = []
    assert resolve_thresholds(cfg, report=said.append, probe=probe) == [2, 10]
    assert "the emulated engines' latency_ms" in said[0] and "drift probe not needed" in said[0]


def test_run_spec_round_trip_and_policy(tmp_path):
    cfg = make(batching={"thresholds": [2, 1], "tables": [{8: 4}, {}], "max_wait_ms": 5})
    placements = tuple(place_models(list(cfg.models), cpus=[0, 1]))
    spec = RunSpec(cfg, ("/x", "/y"), (2, 1), placements, Endpoints(str(tmp_path), 2, (0, 0)))
    spec.save(tmp_path / "run.json")
    again = RunSpec.load(tmp_path / "run.json")
    assert again == spec
    policy = again.policy(0)
    assert policy.threshold_for(10) == 4 and policy.max_wait_s == 0.005 and policy.max_batch == 64


@pytest.mark.parametrize(
    ("router", "small", "large"),
    [
        ({"program": "rstitch", "params": {"tau": 6.0}}, (20, True), (20, True)),
        ({"program": "markov", "params": {"P": [[0.8, 0.2], [1, 0]]}}, (0, False), (0, False)),
        ({"program": "colllm", "params": {"eta": 0.4}}, (20, True), (0, False)),
    ],
)
def test_engines_compute_only_the_signals_their_routing_program_reads(tmp_path, router, small, large):
    from trserve.runtime.worker import all_signals, routing_signals

    cfg = make(router=router)
    placements = tuple(place_models(list(cfg.models), cpus=[0, 1]))
    spec = RunSpec(cfg, ("/x", "/y"), (1, 1), placements, Endpoints(str(tmp_path), 2, (0, 0)))
    for model, (top_k, entropy) in enumerate((small, large)):
        assert routing_signals(spec, model) == {"top_logprobs": top_k, "entropy": entropy}
    assert all_signals(spec) == {"top_logprobs": 20, "entropy": True}


def test_shipped_default_yaml_is_the_embedded_default():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[3] / "configs" / "default.yaml"
    assert load_config(shipped) == default_config()


def test_api_key_from_config_or_environment(monkeypatch):
    from trserve.server.serve import api_key_of

    monkeypatch.delenv("TOKENROUTER_API_KEY", raising=False)
    assert api_key_of(make()) is None
    monkeypatch.setenv("TOKENROUTER_API_KEY", "from-env")
    assert api_key_of(make()) == "from-env"
    assert api_key_of(make(server={"api_key": "from-config"})) == "from-config"


def test_max_active_must_fit_every_engine():
    with pytest.raises(ValidationError, match="max_num_seqs"):
        make(server={"max_active_requests": 100})


def test_max_active_left_out_follows_the_models_max_num_seqs():
    """Raising every model's max_num_seqs raises the requests in flight; lowering one lowers it, with no error."""
    models = [{**TWO[0], "max_num_seqs": 256}, {**TWO[1], "max_num_seqs": 128}]
    wide = ServeConfig.model_validate({"models": models, "server": {"port": 9000}})
    assert wide.server.max_active_requests == 128 and wide.server.port == 9000
    assert yaml.safe_load(dump_config(wide))["server"]["max_active_requests"] == 128  # printed as it runs
    narrow = ServeConfig.model_validate({"models": [{**TWO[0], "max_num_seqs": 8}, TWO[1]]})
    assert narrow.server.max_active_requests == 8
    given = ServeConfig.model_validate({"models": models, "server": {"max_active_requests": 16}})
    assert given.server.max_active_requests == 16


def test_max_active_counts_every_replica_of_a_model():
    """Each request is resident on one replica of each model, so replicas multiply what a model holds."""
    models = [{**TWO[0], "max_num_seqs": 32, "replicas": 4}, {**TWO[1], "max_num_seqs": 64, "replicas": 3}]
    assert ServeConfig.model_validate({"models": models}).server.max_active_requests == 128
    assert ServeConfig.model_validate({"models": models, "server": {"max_active_requests": 128}})
    with pytest.raises(ValidationError, match=r"max_num_seqs x replicas \(128\)"):
        ServeConfig.model_validate({"models": models, "server": {"max_active_requests": 129}})


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"mode": "lockstep", "batching": {"thresholds": [4, 3]}}, "mode 'lockstep' has no delayed batching"),
     ({"mode": "per-token", "batching": {"thresholds": "adaptive"}}, "mode 'per-token' has no delayed batching"),
     ({"mode": "lockstep", "batching": {"tables": [{8: 2}, {}]}}, "batching.tables: mode 'lockstep'"),
     ({"backend": "hash", "server": {"kv_admission": True}}, "server.kv_admission needs a KV pool"),
     ({"backend": "hash", "memory": {"policy": "lru"}}, "memory.policy 'lru' does nothing with backend 'hash'"),
     ({"mode": "per-token", "memory": {"policy": "admission-limit"}}, "with mode 'per-token'"),
     ({"batching": {"thresholds": [1, 1], "tables": [{1: 4}, {1: 4}]}}, "batching.tables: at 1 active requests"),
     ({"batching": {"tables": [{1: 1, 8: 70}, {1: 1}], "max_batch": 8}}, "batching.tables[0]: entry 8: 70 is above"),
     ({"batching": {"thresholds": "adaptive", "adaptive": {"window_s": float("inf")}}}, "finite"),
     ({"batching": {"thresholds": "adaptive", "adaptive": {"change_window_s": 50}}},
      "batching.adaptive.change_window_s: must be finite and >= 0 and below window_s (10.0), got 50.0"),
     ({"batching": {"thresholds": [1, 2], "adaptive": {"window_s": 3}}},
      "batching.adaptive: tunes thresholds: adaptive; thresholds is [1, 2]")],
)  # fmt: skip
def test_settings_that_would_do_nothing_or_never_decide_are_refused(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**changes)


@pytest.mark.parametrize(("window_s", "tick_s", "low"), [(5.0, 0.002, "0.1"), (500.0, 0.2, "0.5")])
def test_a_tick_that_would_reread_a_window_of_thousands_of_spans_is_refused(window_s, tick_s, low):
    # Each tick re-reads every span in the window: at window_s 5, tick_s 0.002 the controller took 1.5 cores.
    knobs = {"window_s": window_s, "tick_s": tick_s}
    with pytest.raises(ValueError, match=re.escape(f"batching.adaptive.tick_s: must be >= {low} s")):
        make(batching={"thresholds": "adaptive", "adaptive": knobs})
    knobs["tick_s"] = float(low)
    assert make(batching={"thresholds": "adaptive", "adaptive": knobs}).batching.adaptive.tick_s == float(low)


def test_a_tick_too_long_to_ever_decide_is_refused_as_the_simulator_refuses_it():
    from trcore.adaptive_window import MAX_TICK_S
    from trsim.adaptive import AdaptiveSimConfig

    with pytest.raises(ConfigError, match="tick_s"):  # the simulator's bound, the one the server shares
        AdaptiveSimConfig(tick_s=MAX_TICK_S * 10)
    with pytest.raises(ValueError, match=re.escape("batching.adaptive.tick_s: must be <= 1e+09 s, got 1e+300")):
        make(batching={"thresholds": "adaptive", "adaptive": {"tick_s": 1e300}})
    assert make(batching={"thresholds": "adaptive", "adaptive": {"tick_s": MAX_TICK_S}}).batching.adaptive.tick_s


def test_lockstep_keeps_the_default_all_ones_thresholds():
    assert make(mode="lockstep", batching={"thresholds": [1, 1]}).mode == "lockstep"


def test_an_emulated_pool_in_per_token_mode_is_refused():
    models = [{"name": n, "emulated": {"latency_ms": 5.0, "kv_tokens": 256}} for n in ("a", "b")]
    with pytest.raises(ValueError, match="mode 'per-token' keeps no KV pool on emulated engines"):
        ServeConfig.model_validate({"backend": "emulated", "mode": "per-token", "models": models})


def test_an_emulated_pool_smaller_than_one_block_is_refused():
    models = [{"name": n, "emulated": {"latency_ms": 5.0, "kv_tokens": 10}, "block_size": 32} for n in ("a", "b")]
    with pytest.raises(ValueError, match=r"emulated\.kv_tokens: 10 tokens hold no whole block of 32"):
        ServeConfig.model_validate({"backend": "emulated", "models": models})


def test_thresholds_beyond_max_batch_are_refused_naming_the_field_in_force():
    with pytest.raises(ConfigError, match=r"batching.thresholds.0: must be within 1..2 \(batching.max_batch\)"):
        resolve_thresholds(make(batching={"thresholds": [8, 1], "max_batch": 2}))
    adaptive = make(batching={"thresholds": "adaptive", "adaptive": {"initial": [0, 1]}})
    with pytest.raises(ConfigError, match=r"batching.adaptive.initial.0: must be within 1..64 \(max_num_seqs\)"):
        resolve_thresholds(adaptive)


def test_the_default_memory_policy_stays_accepted_where_it_does_nothing():
    """A printed config (every field given) of a pool-less or per-token server loads back."""
    for changes in ({"backend": "hash"}, {"mode": "per-token"}):
        assert make(**changes, memory={"policy": "cost"}).memory.policy == "cost"


def test_a_bare_yaml_off_is_the_off_memory_policy(tmp_path):
    """docs/serving.md spells it `memory.policy: off`; YAML reads a bare off as false, which was refused with a
    message listing 'off' itself. A printed config quotes it, and loads back the same."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": TWO}) + "memory:\n  policy: off\n")
    cfg = load_config(path)
    assert cfg.memory.policy == "off"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg
    with pytest.raises(ValidationError, match=r"memory\.policy"):
        make(memory={"policy": True})  # a bare on is no policy


@pytest.mark.parametrize(
    ("model", "field"),
    [({"emulated": {"latency_ms": 5.0, "kv_tokens": 10**30}}, "emulated.kv_tokens"),
     ({"emulated": {"latency_ms": 5.0, "kv_tokens": 10**30}, "block_size": 10**29}, "block_size"),
     ({"emulated": {"latency_ms": 5.0}, "max_model_len": 10**30}, "max_model_len")],
)  # fmt: skip
def test_token_counts_beyond_what_the_workers_messages_carry_are_refused(model, field):
    """A worker's Ready and step reports (and a request's max_tokens, up to max_model_len) are 64-bit integers on
    the wire: a larger value crashed the worker at start-up (or answered 500), instead of naming the field."""
    models = [{"name": n, **model} for n in ("a", "b")]
    with pytest.raises(ValidationError, match=rf"{field}\n  Input should be less than or equal to {2**63 - 1}"):
        ServeConfig.model_validate({"backend": "emulated", "models": models})
