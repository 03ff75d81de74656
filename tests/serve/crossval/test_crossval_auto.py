"""``thresholds: auto`` from profiles and routing traces (or the router's matrices) through the optimizer, and
crossval's rescaling to observed step times, each checked against a hand computation."""

from __future__ import annotations

import json

import pytest

from tests.serve.synthetic_profiles import by_hand, write_profiles


def _auto_config(tmp_path, traces_path, concurrency=4, min_gain=0.0, **router):
    from trserve.config import ServeConfig

    models = [{"name": "small", "path": "x", "max_num_seqs": 8}, {"name": "large", "path": "y", "max_num_seqs": 8}]
    auto = {"concurrency": concurrency, "calibration_dir": str(tmp_path), "routing_traces": traces_path,
            "min_gain": min_gain}  # fmt: skip
    data = {"models": models, "batching": {"thresholds": "auto", "auto": auto}, "server": {"max_active_requests": 8}}
    return ServeConfig.model_validate({**data, **router})


def test_auto_thresholds_come_from_profiles_and_traces_via_the_optimizer(tmp_path):
    from trcore.throughput import ThroughputModel, feasible_thresholds
    from trserve.hardware import hardware_tag
    from trserve.server.thresholds import profile_latency, resolve_thresholds
    from trsim.profile import load_profile

    write_profiles(tmp_path / hardware_tag(), ["small", "large"])
    # 8 requests of a stationary-like pattern: 3 steps on the small model, one (dropped token) on the large one.
    steps = [[0, 0, 1], [0, 0, 1], [0, 1, 0], [1, 0, 1]] * 3
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps({"request_id": f"r{k}", "steps": steps}) + "\n" for k in range(8)))
    cfg = _auto_config(tmp_path, str(traces))
    reported: list[str] = []
    chosen = resolve_thresholds(cfg, report=reported.append)

    # The same optimum by solving every feasible vector one by one (another path through the model), with the
    # P, C the traces imply: the last step of each request returns to the entry model (closed loop).
    P, C = [[8 / 12, 4 / 12], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]
    tables = [[profile_latency(load_profile(tmp_path / hardware_tag() / f"{m}.json"), b) for b in range(1, 5)]
              for m in ("small", "large")]  # fmt: skip
    model = ThroughputModel(P, C, tables, quantum_s=0.1 * min(map(min, tables)), max_batch=[4, 4])
    best = max(feasible_thresholds([4, 4], 4), key=lambda b: model.solve(4, b).throughput_tok_s)
    assert chosen == list(best)
    err = " ".join(reported)
    assert f"thresholds auto: {chosen}" in err and "traces.jsonl" in err and "[0.667, 0.333]" in err


def test_auto_thresholds_use_the_router_matrices_without_traces_and_name_missing_inputs(tmp_path):
    from trcore.errors import ConfigError
    from trserve.hardware import hardware_tag
    from trserve.server.thresholds import resolve_thresholds

    write_profiles(tmp_path / hardware_tag(), ["small", "large"])
    markov = {"router": {"program": "markov", "params": {"P": [[0.5, 0.5], [1, 0]], "C": [[1, 0], [1, 0]]}}}
    assert len(resolve_thresholds(_auto_config(tmp_path, None, concurrency=2, **markov))) == 2
    with pytest.raises(ConfigError, match="routing_traces"):
        resolve_thresholds(_auto_config(tmp_path, None))  # rstitch has no P: traces are needed
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_thresholds(_auto_config(tmp_path, str(tmp_path / "missing.jsonl")))


def test_rescaling_to_observed_step_times_matches_a_hand_computed_throughput(tmp_path):
    from trcore.routing_stats import estimate_routing_stats
    from trcore.traces import RequestTrace, TraceStep
    from trserve.crossval.diagnose import add_rescaled_predictions
    from trserve.crossval.predict import load_calibration

    write_profiles(tmp_path / "profiles", ["small", "large"])
    calibration = load_calibration(tmp_path / "profiles", ["small", "large"])
    # One request at a time, alternating small, large, small, ...: every step commits one token.
    steps = (TraceStep(0, 1, True), TraceStep(1, 0, True)) * 15
    traces = [RequestTrace(f"r{k}", steps, 20, 30) for k in range(6)]
    stats = estimate_routing_stats(traces, 2, entry_model=0)
    # The synthetic profiles by hand at batch 1, 30 tokens of context: a_k + b + c * 30.
    lat = [by_hand(k, 1, 30) for k in range(2)]
    slow = (2.0, 1.5)  # "the machine was busier than at calibration"
    measured = 2 / (slow[0] * lat[0] + slow[1] * lat[1])  # two tokens per small + large visit
    steps_seen = [{"num_steps": 10, "mean_batch": 1.0, "mean_step_s": f * t, "busy_fraction": 0.5}
                  for f, t in zip(slow, lat, strict=True)]  # fmt: skip
    cell = {"router": "r", "concurrency": 1, "thresholds": [1, 1], "measured_tok_s": measured,
            "steps": steps_seen, "profile_step_s_at_mean_batch": lat}  # fmt: skip
    summary = add_rescaled_predictions([cell], {"r": stats}, {"r": traces}, calibration, {"r": (30, [0.0, 0.0])}, 8, 60)
    assert cell["slowdown"] == pytest.approx([2.0, 1.5])
    assert cell["model_rescaled_tok_s"] == pytest.approx(measured, rel=0.02)  # 1 ms time grid
    assert cell["sim_rescaled_tok_s"] == pytest.approx(measured, rel=0.05)  # the sim also prices the prefills
    assert summary["r"]["median_slowdown"] == pytest.approx([2.0, 1.5])
    assert 2 / (lat[0] + lat[1]) > 1.5 * measured  # without the rescaling the prediction would be far off
