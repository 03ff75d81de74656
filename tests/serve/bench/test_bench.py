"""``tokenrouter bench``: the small CI version (every system, one router, one N, one repetition, real vLLM
servers on the local pair, about 3 minutes) plus the pure pieces (system configs, P/C estimation, fits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trserve.bench.client import RequestRecord, summarize
from trserve.bench.predict import fit_line, model_prediction, own_routing_prediction, sim_prediction
from trserve.bench.systems import SYSTEMS, system_config
from trserve.bench.window_stats import StepStats, routing_matrices
from trserve.config import ServeConfig
from trserve.hardware import cpu_model, hardware_tag
from trserve.paths import calibration_dir
from trserve.server.defaults import DEFAULT_CONFIG, OPERATING_POINTS

ROOT = Path(__file__).resolve().parents[3]


def profiles_cpu() -> str:
    """The CPU model the committed one-core profiles of this machine's tag were measured on."""
    path = calibration_dir("profiles", hardware_tag(), "large.json")
    return str(json.loads(path.read_text())["machine"].get("cpu_model"))


REPLICAS_CONFIG = ROOT / "configs/emulated-r2r-a100-replicas.yaml"

TABLE = {1: [1, 1], 4: [2, 1]}


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_is_a_valid_serve_config(system: str) -> None:
    cfg = ServeConfig.model_validate(system_config(DEFAULT_CONFIG, system, "r2r", TABLE))
    if system == "llm-only":
        assert [m.name for m in cfg.models] == ["large"]
    else:
        assert cfg.router.program == "r2r" and cfg.num_models == 2
    if system in ("tokenrouter", "tokenrouter-readmit"):
        assert cfg.batching.tables == [{1: 1, 4: 2}, {1: 1, 4: 1}]
    assert cfg.handoff == ("readmit" if system == "tokenrouter-readmit" else "session")
    assert cfg.mode == (system if system in ("lockstep", "per-token") else "routed")
    lru = ServeConfig.model_validate(
        system_config({**DEFAULT_CONFIG, "memory": {"policy": "lru"}}, system, "r2r", TABLE)
    )
    assert lru.memory.policy == ("cost" if system == "per-token" else "lru")  # per-token's engines keep vLLM's own


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_runs_a_base_config_that_admits_by_kv_headroom(system: str) -> None:
    """The front end's KV gate is routed mode's: the baselines run without it (a lockstep cell was a traceback)."""
    base = {**DEFAULT_CONFIG, "server": {**DEFAULT_CONFIG.get("server", {}), "kv_admission": True}}
    cfg = ServeConfig.model_validate(system_config(base, system, "r2r", TABLE))
    assert cfg.server.kv_admission == (cfg.mode == "routed")


def test_per_token_with_emulated_pools_is_refused_before_any_cell_runs() -> None:
    import yaml

    from trcore.errors import ConfigError
    from trserve.bench.systems import check_systems_fit

    base = yaml.safe_load((ROOT / "configs/emulated-r2r-a100.yaml").read_text())
    check_systems_fit(base, ["tokenrouter", "lockstep", "per-token"])  # no pools: every system runs
    base["models"] = [{**m, "emulated": {"latency_ms": 5.0, "kv_tokens": 4096}} for m in base["models"]]
    check_systems_fit(base, ["tokenrouter", "lockstep", "llm-only"])
    with pytest.raises(ConfigError, match="systems: per-token keeps no KV pool on emulated engines"):
        check_systems_fit(base, ["tokenrouter", "per-token"])


@pytest.mark.parametrize("backend", ["emulated", "hash"])
def test_readmit_on_stand_in_engines_is_refused_not_served_as_sessions(backend: str) -> None:
    """Stand-in engines keep every session, so readmit would silently measure session hand-off."""
    import yaml

    from trcore.errors import ConfigError
    from trserve.bench.systems import check_systems_fit

    emulated = yaml.safe_load((ROOT / "configs/emulated-r2r-a100.yaml").read_text())
    base = emulated if backend == "emulated" else {**DEFAULT_CONFIG, "backend": "hash"}
    with pytest.raises(ConfigError, match=f"tokenrouter-readmit re-adds requests to vLLM; backend '{backend}'"):
        check_systems_fit(base, ["tokenrouter", "tokenrouter-readmit"])
    with pytest.raises(ValidationError, match=f"handoff: readmit re-adds requests to vLLM .* backend '{backend}'"):
        ServeConfig.model_validate({**base, "handoff": "readmit"})
    check_systems_fit(DEFAULT_CONFIG, ["tokenrouter-readmit"])  # real engines: it runs
    assert ServeConfig.model_validate({**DEFAULT_CONFIG, "handoff": "readmit"}).handoff == "readmit"


def test_llm_only_needs_no_operating_point_of_the_router_it_ignores() -> None:
    import yaml

    base = yaml.safe_load((ROOT / "configs/emulated-r2r-a100.yaml").read_text())  # a pair with no rstitch point
    cfg = ServeConfig.model_validate(system_config(base, "llm-only", "rstitch"))
    assert cfg.num_models == 1 and cfg.models[0].name == base["models"][-1]["name"]


def test_router_parameters_come_from_the_base_config_when_it_routes_with_that_program() -> None:
    from trserve.bench.systems import ROUTER_PARAMS

    base = {**DEFAULT_CONFIG, "router": {"program": "rstitch", "params": {"tau": 3.0, "tau_back": 2.0}}}
    assert system_config(base, "tokenrouter-b1", "rstitch")["router"]["params"] == {"tau": 3.0, "tau_back": 2.0}
    assert system_config(base, "tokenrouter-b1", "r2r")["router"]["params"] == ROUTER_PARAMS["r2r"]
    given = system_config(base, "lockstep", "rstitch", router_params={"tau": 1.0})
    assert given["router"]["params"] == {"tau": 1.0}


def test_optimized_systems_need_the_threshold_table() -> None:
    from trcore.errors import ConfigError

    with pytest.raises(ConfigError, match="threshold table"):
        system_config(DEFAULT_CONFIG, "tokenrouter", "rstitch", None)


def test_routing_matrices_recover_drop_and_return() -> None:
    # r2r-like: small drops the token it routes away (commits 0), large regenerates it and always returns.
    small = StepStats(request_steps=100, steps=20, step_seconds=1.0, handoffs=25, tokens=75)
    large = StepStats(request_steps=25, steps=10, step_seconds=1.0, handoffs=25, tokens=25)
    P, C = routing_matrices([small, large])
    assert P == [[0.75, 0.25], [1.0, 0.0]]
    assert C[0][1] == 0.0 and C[1][0] == 1.0


def test_a_request_that_ends_on_the_large_model_moves_to_the_entry_model_not_stays() -> None:
    """100 large steps: 30 hand back, 2 end their request (no hand-off, their token kept). Without the finish
    counter those 2 read as stays (P[1][1] = 0.7); the model's endless requests are replaced on the entry model,
    so they are moves there with the token kept: P[1] = [0.32, 0.68], C[1][0] = 1. Ends on the entry model stay."""
    small = StepStats(request_steps=100, steps=50, step_seconds=1.0, handoffs=30, tokens=70, finishes=3)
    large = StepStats(request_steps=100, steps=20, step_seconds=1.0, handoffs=30, tokens=100, finishes=2)
    P, C = routing_matrices([small, large])
    assert P[0] == pytest.approx([0.7, 0.3]) and C[0][1] == 0.0
    assert P[1] == pytest.approx([0.32, 0.68]) and C[1][0] == 1.0
    old = routing_matrices([small, StepStats(100, 20, 1.0, 30, 100)])
    assert old[0][1] == pytest.approx([0.3, 0.7])
    # A model whose only moves are ends: its token is kept on them.
    P, C = routing_matrices([small, StepStats(100, 20, 1.0, 0, 100, finishes=5)])
    assert P[1] == pytest.approx([0.05, 0.95]) and C[1][0] == 1.0


def test_the_own_routing_diagnosis_reads_the_cells_windows_pooled() -> None:
    """One request (N = 1, B = 1) on 6.0 / 27.9 ms steps; the small model hands off a fraction ``a`` of its
    steps (dropping that token), the large one commits one and returns: a cycle of 1/a small steps and one large
    step commits 1/a tokens, so 1 / (Ls + a Ll) tok/s. Two windows handing off 40% and 60% pool to a = 0.5."""
    tables = [[0.006], [0.0279]]

    def window(a: float) -> list[StepStats]:
        small = StepStats(request_steps=100, steps=100, step_seconds=0.6, handoffs=100 * a, tokens=100 * (1 - a))
        large = StepStats(request_steps=100 * a, steps=100 * a, step_seconds=2.79 * a, handoffs=100 * a,
                          tokens=100 * a)  # fmt: skip
        return [small, large]

    pooled = own_routing_prediction([window(0.4), window(0.6)], tables, 1, [1, 1])
    assert pooled == pytest.approx(1 / (0.006 + 0.5 * 0.0279), rel=0.02)
    assert own_routing_prediction([window(0.25)], tables, 1, [1, 1]) == pytest.approx(
        1 / (0.006 + 0.25 * 0.0279), rel=0.02
    )
    assert own_routing_prediction([], tables, 1, [1, 1]) is None


def test_fit_line_recovers_a_linear_latency() -> None:
    points = [(b, 0.024 + 0.002 * b) for b in (1.0, 2.5, 4.0, 8.0)]
    intercept, slope = fit_line(points)
    assert intercept == pytest.approx(0.024) and slope == pytest.approx(0.002)


def test_model_and_simulator_agree_on_a_markov_system() -> None:
    P, C = [[0.75, 0.25], [0.5, 0.5]], [[1.0, 0.0], [1.0, 1.0]]
    tables = [[0.024 + 0.002 * b for b in range(1, 5)], [0.057 + 0.003 * b for b in range(1, 5)]]
    model = model_prediction(P, C, tables, 4, [1, 1])
    sim = sim_prediction(P, C, tables, 4, [1, 1], "tokenrouter", 20000)
    assert sim == pytest.approx(model, rel=0.05)
    assert sim_prediction(P, C, tables, 4, [1, 1], "lockstep", 20000) < sim


def test_summarize_keeps_only_requests_finished_in_the_window() -> None:
    recs = [RequestRecord(0.0, 0.5, 2.0, 11), RequestRecord(1.0, 1.2, 9.0, 11), RequestRecord(3.0, 3.1, 4.1, 11)]
    result = summarize(recs, 2, win_start=1.5, win_end=5.0)
    assert result.num_finished == 2
    assert result.ttft_s == pytest.approx([0.5, 0.1])
    assert result.tpot_s == pytest.approx([0.15, 0.1])


def test_unknown_system_is_one_line_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "tokenrouter.cli", "bench", "--systems", "fastest"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "fastest" in proc.stderr and "lockstep" in proc.stderr


def test_a_config_with_replicas_is_one_line_error() -> None:
    """The bench's counters and predictions are per model: a config with replicas is refused (exit 2) and the
    message names the benchmark that measures replicas, which exists."""
    proc = subprocess.run([sys.executable, "-m", "tokenrouter.cli", "bench", "--config", str(REPLICAS_CONFIG)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "models.replicas" in proc.stderr and "[2, 1]" in proc.stderr
    assert "benchmarks/replicas_bench.py" in proc.stderr and (ROOT / "benchmarks/replicas_bench.py").is_file()


#: Short answers, so that each system answers several requests in full within its 2 s (at 10-30 tok/s for N = 2).
MAX_TOKENS = 8


@pytest.mark.serve
def test_small_bench_runs_every_system_on_real_engines(tmp_path: Path, prepared_pair: tuple[Path, Path]) -> None:
    """The CI bench: the seven TokenRouter-served systems, rstitch, N = 2, one short window each, real vLLM servers
    on the local pair, and the plain-vLLM overhead reference (about 3 minutes), after the drift probe of the pair
    and of each model alone on every core (three more engine start-ups and about 30 s of probing)."""
    out = tmp_path / "out"
    # Every TokenRouter-served system; vLLM's own server is tested apart (tests/serve/bench/test_vllm_server.py).
    cmd = [sys.executable, "-m", "tokenrouter.cli", "bench", "--routers", "rstitch", "-n", "2", "--repetitions", "1",
           "--warmup-s", "0.5", "--window-s", "1.5", "--max-tokens", str(MAX_TOKENS), "--systems", ",".join(SYSTEMS),
           "--out", str(out)]  # fmt: skip
    measured_on = profiles_cpu()
    if measured_on != cpu_model():
        # The bench predicts from this machine's profiles and refuses another CPU's (no silent fallback): on such
        # a machine that refusal is what can be checked; the rest needs `tokenrouter calibrate` here first.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and measured_on in proc.stderr and cpu_model() in proc.stderr, proc.stderr[-2000:]
        pytest.skip(f"committed profiles measured on {measured_on}, this machine is {cpu_model()}: refusal checked")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "bench.json").read_text())
    assert {r["system"] for r in doc["runs"]} == set(SYSTEMS)
    # No speed comparison between systems here: a 1.5 s window on a shared machine is too noisy for one (the CI run
    # of bf587e9 saw lockstep 1% above tokenrouter-b1); the committed bench compares them (docs/bench/bench.json).
    for run in doc["runs"]:
        assert run["concurrency"] == 2 and run["throughput_tok_s"] > 0
        # Every answer the system wrote has exactly the tokens asked (max_tokens, ignore_eos): none lost, none
        # written twice, whatever the system.
        answered = run["answered"]
        assert answered["requests"] > 0 and run["num_failed"] == 0, run
        assert answered["tokens"] == answered["asked_tokens"] == MAX_TOKENS * answered["requests"], run
        assert 0.0 <= run["llm_token_fraction"] <= 1.0
        source = run["latency_source"]
        if run["system"].startswith("tokenrouter"):  # out of sample: the one-core profiles of this machine
            assert run["predicted_model_tok_s"] > 0 and source.startswith("calibration profile"), run
        elif run["system"] == "per-token":  # no throughput model; the simulator with priced recompute
            assert run["predicted_model_tok_s"] is None and run["predicted_sim_tok_s"] > 0, run
        elif not source.startswith("calibration profile"):  # lockstep, llm-only without all-cores profiles
            assert run["predicted_model_tok_s"] is None and source.startswith("none"), run
    # The default config routes rstitch at its committed operating point: its rows carry that point's quality.
    point = json.loads(OPERATING_POINTS.read_text())
    routed = [r for r in doc["runs"] if r["system"] == "tokenrouter"]
    assert [r["quality"]["large_share"] for r in routed] == [point["rstitch"]["large_share"]]
    matched = {m["system"]: m for m in doc["matched_quality"]}
    assert matched["tokenrouter"]["accuracy"] == point["rstitch"]["accuracy"]
    assert matched["llm-only"]["large_share"] == 1.0 and "over_llm_only" in matched["tokenrouter"]
    assert doc["routing"]["rstitch"]["optimized_thresholds"]["2"]
    _check_drift(doc, (out / "bench.md").read_text())
    assert doc["vllm_direct"]["throughput_tok_s"] > 0 and doc["targets"]["overhead"]["ratio"] > 0
    assert (out / "bench.png").stat().st_size > 10_000
    assert "| rstitch | tokenrouter | 2 |" in (out / "bench.md").read_text()


def _check_drift(doc: dict, markdown: str) -> None:
    """The drift probe ran before the bench (default ``--drift scale``): the pair on one server, each model alone
    on every core when that placement has profiles; every ratio rests on decode steps and became the factor the
    profile-based predictions carry."""
    from trserve.hardware import hardware_tag

    drift = doc["drift"]
    assert drift["mode"] == "scale" and drift["tolerance"] == 0.05
    placements = drift["placements"]
    assert set(placements) == {hardware_tag(), f"{hardware_tag()}-allcores"}
    for tag, entry in placements.items():
        assert entry["models"] == ["small", "large"], entry
        if entry["action"].startswith("not probed"):  # no all-cores profiles on this machine
            assert tag.endswith("-allcores") and entry["action"] == "not probed: no profile of this placement"
            continue
        assert entry["action"] == "scaled" and entry["factors"] == entry["ratios"], entry
        # No bound above: under load the engines step far slower than profiled (6.3x and 17.5x seen at load ~10
        # on the 2 cores), which is what the probe is for.
        assert all(n > 0 for n in entry["num_steps"]) and all(r > 0 for r in entry["ratios"]), entry
        assert all(1 <= int(b) <= 4 for per_batch in entry["per_batch"] for b in per_batch)  # probe N <= 4
    b1 = next(r for r in doc["runs"] if r["system"] == "tokenrouter-b1")
    pair = placements[hardware_tag()]["factors"]
    scaled = f"calibration profile ({hardware_tag()}), x drift " + "/".join(f"{f:.2f}" for f in pair)
    assert scaled in b1["latency_source"]
    assert "Drift probe (--drift scale, tolerance 5%): " in markdown and "small" in markdown.split("Drift probe")[1]


def test_statistics_of_a_large_model_that_never_hands_back_give_no_model_prediction() -> None:
    """rstitch with tau_back 0 keeps every visit on the large model: the chain is reducible, so the bench runs
    B = 1 and prints "-" instead of crashing (it did, at N = 4, on the quality operating point)."""
    from trcore.errors import NotIrreducibleError
    from trserve.bench import predict

    tables = [[0.03, 0.035, 0.04, 0.045], [0.06, 0.07, 0.08, 0.09]]
    P, C = [[0.9, 0.1], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]
    assert predict.model_prediction(P, C, tables, 4, [1, 1]) == pytest.approx(4 / 0.09)  # all end on the LLM
    assert predict.model_prediction(P, C, tables, 4, [2, 1]) is None  # a lone SLM request may wait forever
    with pytest.raises(NotIrreducibleError):
        predict.optimize_table(P, C, tables, [4])  # what the runner catches to fall back to B = 1
