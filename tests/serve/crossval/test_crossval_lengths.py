"""``tokenrouter crossval --lengths``: the bench's length presets as crossval's load, and the simulator given the
same KV memory as the engines (their reported pools, the config's block size, ``max_num_seqs`` and spill
policy), with each cell's memory events beside the simulator's."""

from __future__ import annotations

import json
import traceback

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tokenrouter.commands.crossval import crossval
from trcore.errors import ConfigError
from trcore.memory import KVBudget
from trserve.bench.requests import Lengths, request_body
from trserve.config import ServeConfig
from trserve.crossval.fidelity import memory_events
from trserve.crossval.harness import StepRecord
from trserve.crossval.predict import kv_for_sim
from trserve.crossval.workloads import NUM_LENGTHS, lengths_workload

app = typer.Typer()
app.command()(crossval)
runner = CliRunner()


def emulated_config(kv_tokens: int | None = None, policy: str = "cost") -> dict:
    def model(name: str, ms: float) -> dict:
        return {"name": name, "block_size": 16, "max_num_seqs": 64, "max_model_len": 1024,
                "emulated": {"latency_ms": ms, "kv_tokens": kv_tokens}}  # fmt: skip

    router = {"program": "markov", "params": {"P": [[0.65, 0.35], [1.0, 0.0]], "C": [[1, 0], [1, 0]], "seed": 0}}
    return {"mode": "routed", "backend": "emulated", "models": [model("small", 6.0), model("large", 27.9)],
            "router": router, "memory": {"policy": policy}}  # fmt: skip


def test_crossval_sends_the_requests_the_bench_sends_for_its_first_client():
    cfg = ServeConfig.model_validate(emulated_config())
    lengths = Lengths("short-reasoning", 0.125)
    work = lengths_workload(cfg, lengths, 1.0, 2.0)
    assert len(work.prompts) == len(work.output_lengths) == NUM_LENGTHS and work.name == "short-reasoningx0.125"
    for k in (0, 1, 17, NUM_LENGTHS - 1):
        body = request_body(lengths, 0, k, None)
        assert list(work.prompts[k]) == body["prompt"] and work.output_length(k) == body["max_tokens"]
    assert work.max_tokens == max(work.output_lengths)


def test_a_preset_longer_than_a_models_context_is_refused_naming_the_option():
    cfg = ServeConfig.model_validate(emulated_config())  # max_model_len 1024; short-reasoning reaches 2,048 + 1,024
    with pytest.raises(ConfigError, match="--lengths: short-reasoning x 1 allows"):
        lengths_workload(cfg, Lengths("short-reasoning"), 1.0, 2.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--lengths", "short-reasoning", "--workload", "fixed"], "--lengths: give --lengths or --workload"),
     (["--lengths", "tiny"], "--lengths: unknown preset 'tiny'"),
     (["--lengths", "short-reasoning", "--length-scale", "0"], "--length-scale: must be > 0"),
     (["--lengths", "short-reasoning", "--length-scale", "inf"], "--length-scale: must be > 0 and finite"),
     (["--length-scale", "0.5"], "--length-scale: scales --lengths; give --lengths too"),
     (["--lengths", "short-reasoning", "--max-tokens", "8"], "--max-tokens: --lengths draws each request's output"),
     (["--routers", ""], "--routers: needs at least one router"), (["-n", ""], "--concurrency: expected"),
     (["--workload", ""], "--workload: unknown workload ''")],
)  # fmt: skip
def test_bad_length_options_are_one_line_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_the_simulator_gets_each_engines_reported_pool_in_the_configs_blocks():
    cfg = ServeConfig.model_validate(emulated_config(kv_tokens=320, policy="lru"))
    kv = kv_for_sim(cfg, {0: 320, 1: 500})
    assert kv is not None and kv.spill == "lru"
    assert kv.budgets == (KVBudget(20, 16, 64), KVBudget(31, 16, 64))  # 500 // 16 = 31 whole blocks
    assert kv_for_sim(cfg, {0: 320}) is None  # one engine reported no pool: no accounting to mirror
    off = ServeConfig.model_validate(emulated_config(kv_tokens=320, policy="off"))
    assert kv_for_sim(off, {0: 320, 1: 320}) is None


def test_memory_events_are_the_counters_growth_inside_each_window_summed():
    def rec(model: int, spilled: int, preempted: int) -> StepRecord:
        counters = {"spilled": spilled, "preempted": preempted, "recomputed_tokens": 10 * preempted,
                    "admission_waits": 0}  # fmt: skip
        return StepRecord(0.0, model, 1, 0.01, 1, memory={"blocks_used": 3, **counters})

    first = [rec(0, 1, 0), rec(1, 0, 2), rec(0, 4, 1), rec(1, 0, 5)]
    second = [rec(0, 10, 1), rec(0, 11, 3)]  # model 1 did not step in this window
    events = memory_events([first, second], 2)
    assert events == [{"spilled": 3 + 1, "preempted": 1 + 2, "recomputed_tokens": 30, "admission_waits": 0},
                      {"spilled": 0, "preempted": 3, "recomputed_tokens": 30, "admission_waits": 0}]  # fmt: skip
    assert memory_events([[StepRecord(0.0, 0, 1, 0.01, 1)]], 1) is None  # no accounting


def test_emulated_crossval_with_lengths_and_a_short_cache_predicts_with_the_same_memory(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(emulated_config(kv_tokens=320)))
    out = tmp_path / "out"
    args = ["--config", str(config), "-n", "8", "--thresholds", "1,1", "--routers", "markov", "--lengths",
            "short-reasoning", "--length-scale", "0.0625", "--warmup-s", "0.5", "--measure-s", "1.5", "--repeats",
            "1", "--drift", "skip", "--no-stack-probe", "--sim-s", "10", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(traceback.format_exception(*result.exc_info))
    doc = json.loads((out / "crossval.json").read_text())
    assert doc["workload"]["name"] == "short-reasoningx0.0625"
    assert doc["memory"]["kv_capacity_tokens"] == {"0": 320, "1": 320}
    assert doc["memory"]["simulator"] == {"spill": "cost", "budgets": [
        {"num_blocks": 20, "block_size": 16, "max_seqs": 64}] * 2}  # fmt: skip
    (cell,) = doc["cells"]
    assert cell["measured_tok_s"] > 0 and cell["sim_tok_s"] > 0
    # Eight requests of about 6 + 80 tokens need twice the 320 tokens each model holds: both sides make room.
    real, sim = cell["memory"]["real"], cell["memory"]["sim"]
    assert sum(m["spilled"] + m["preempted"] + m["admission_waits"] for m in real) > 0
    assert [m["capacity_blocks"] for m in sim["models"]] == [20, 20] and sim["num_failed"] == 0
    assert sum(m["num_spilled"] + m["num_preempted"] + m["num_admission_waits"] for m in sim["models"]) > 0
    drawn = set(lengths_workload(ServeConfig.model_validate(emulated_config()), Lengths("short-reasoning", 0.0625),
                                 1.0, 1.0).output_lengths)  # fmt: skip
    replayed = [json.loads(line) for line in (out / "traces-markov.jsonl").read_text().splitlines()]
    assert replayed and all(t["num_output_tokens"] in drawn for t in replayed)  # each at its drawn length
