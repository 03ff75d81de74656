"""The bench's length-preset load (trserve/bench/requests.py, Workload.lengths) and its memory counters per cell
(trserve/bench/memory.py): hand-worked cases, then one short closed loop on an emulated server whose answers are
the same in two runs."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.serve.emulated_fixtures import emulated_config, emulated_url
from trcore.errors import ConfigError
from trserve import eventloop
from trserve.bench.client import Workload, run_load
from trserve.bench.memory import cell_memory, window_memory
from trserve.bench.requests import SCHEDULE_SLACK, Lengths, markov_schedule, request_body
from trserve.bench.stream import Connection
from trsim.lengths import LengthDist, lognormal


def test_a_scaled_distribution_scales_every_length_and_keeps_them_positive() -> None:
    dist = lognormal(1200, 0.6, maximum=2048, minimum=16).scaled(0.25)
    assert (dist.median, dist.minimum, dist.maximum, dist.sigma) == (300, 4, 512, 0.6)
    tiny = LengthDist("uniform", low=2, high=3).scaled(0.1)
    assert (tiny.low, tiny.high) == (1, 1)
    for factor in (0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="length_scale"):
            lognormal(10, 0.1).scaled(factor)


def test_requests_are_the_same_for_the_same_client_and_index_and_within_the_preset() -> None:
    lengths = Lengths("short-reasoning", scale=0.25)
    assert lengths.draw(3, 7) == lengths.draw(3, 7) == Lengths("short-reasoning", 0.25).draw(3, 7)
    assert lengths.max_total_tokens == 256 + 512  # prompts clipped at 1,024 and outputs at 2,048, times 0.25
    draws = [lengths.draw(k, i) for k in range(5) for i in range(40)]
    assert len(set(draws)) > 150 and all(2 <= p <= 256 and 4 <= o <= 512 for p, o in draws)
    cpu = Lengths("short-reasoning-cpu")
    assert all(256 <= cpu.draw(0, i)[1] <= 1024 for i in range(100))


def test_unknown_or_unbounded_presets_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: agentic, endless"):
        Lengths("chat")
    with pytest.raises(ConfigError, match="unbounded"):
        Lengths("endless")


def test_the_schedule_alternates_on_a_cycle_and_counts_only_kept_tokens() -> None:
    cycle = markov_schedule([[0, 1], [1, 0]], [[1, 1], [1, 1]], random.Random(0), 4)
    assert cycle == [[1, True], [0, True], [1, True], [0, True]] + [[0, True]] * SCHEDULE_SLACK
    # R2R's shape: the small token of a hand-off is dropped and the large model writes it, so 3 tokens take 6 steps.
    r2r = markov_schedule([[0, 1], [1, 0]], [[1, 0], [1, 1]], random.Random(0), 3)
    assert r2r[:6] == [[1, False], [0, True]] * 3 and len(r2r) == 6 + SCHEDULE_SLACK


def test_a_request_body_carries_its_prompt_ids_length_and_schedule() -> None:
    lengths = Lengths("short-reasoning", scale=0.1, seed=5)
    body = request_body(lengths, 1, 2, ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]))
    num_prompt, num_output = lengths.draw(1, 2)
    assert len(body["prompt"]) == num_prompt and body["max_tokens"] == num_output and body["ignore_eos"]
    schedule = body["routing_extra"]["schedule"]
    assert sum(kept for _, kept in schedule[:-SCHEDULE_SLACK]) == num_output
    assert body == request_body(lengths, 1, 2, ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]))
    assert "routing_extra" not in request_body(lengths, 1, 2, None)


METRICS_BEFORE = """\
tokenrouter_kv_events_total{model="large",event="spilled"} 2.0
tokenrouter_kv_events_total{model="large",event="recomputed_tokens"} 100.0
"""
METRICS_AFTER = """\
tokenrouter_kv_blocks{kind="total",model="large"} 64.0
tokenrouter_kv_blocks{kind="used",model="large"} 60.0
tokenrouter_kv_blocks{kind="parked",model="large"} 12.0
tokenrouter_kv_blocks{kind="free",model="large"} 4.0
tokenrouter_kv_events_total{model="large",event="spilled"} 5.0
tokenrouter_kv_events_total{model="large",event="preempted"} 1.0
tokenrouter_kv_events_total{model="large",event="recomputed_tokens"} 400.0
tokenrouter_kv_events_total{model="large",event="admission_waits"} 0.0
"""


def test_memory_counters_are_blocks_at_the_end_and_events_during_the_window() -> None:
    window = window_memory(METRICS_AFTER, METRICS_BEFORE)
    assert window == {"large": {"blocks_total": 64, "blocks_used": 60, "blocks_parked": 12, "spilled": 3,
                                "preempted": 1, "recomputed_tokens": 300, "admission_waits": 0}}  # fmt: skip
    second = {"large": {**window["large"], "blocks_used": 50, "spilled": 1}}
    cell = cell_memory([window, second])
    assert cell is not None
    assert cell["large"]["blocks_used"] == 50 and cell["large"]["blocks_used_max"] == 60
    assert cell["large"]["spilled"] == 4 and cell["large"]["recomputed_tokens"] == 600
    assert window_memory("", "") == {} and cell_memory([{}, {}]) is None


class Rec:
    first: float | None = None
    num_tokens = 0
    texts: list[str] | None = None


def test_the_text_of_every_chunk_is_collected_when_asked() -> None:
    rec = Rec()
    rec.texts = []
    chunk = b'data: {"choices":[{"text":"ab"}]}\n\ndata: {"choices":[{"text":"c"}],"usage":{"completion_tokens":3}}\n\n'
    Connection._parse_events(chunk, rec, rec.texts)
    assert rec.texts == ["ab", "c"] and rec.num_tokens == 3


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A routed emulated server (1 / 2 ms steps, a 4,096-token pool each) routed by each request's schedule."""
    config = emulated_config({"program": "schedule", "params": {}}, kv_tokens=4096)
    yield from emulated_url(tmp_path_factory.mktemp("lengths"), config)


@pytest.mark.serve
def test_a_preset_load_writes_the_same_answers_twice_and_reports_memory(url: str) -> None:
    routing = ([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])
    work = Workload(warmup_s=0.2, window_s=1.0, lengths=Lengths("short-reasoning", 0.02), routing=routing,
                    record_text=True)  # fmt: skip
    first, second = (eventloop.run(run_load(url, 3, work)) for _ in range(2))
    assert first.num_failed == second.num_failed == 0
    common = set(first.answers) & set(second.answers)
    assert len(common) >= 3 and all(first.answers[k] == second.answers[k] for k in common)
    memory = cell_memory([window_memory(first.metrics_after, first.metrics_before)])
    assert memory is not None and memory["large"]["blocks_total"] == 4096 // 32


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--length-scale", "0.5"], "--length-scale: scales --lengths; give --lengths too"),
     (["--lengths", "short-reasoning", "--max-tokens", "7"], "--max-tokens: --lengths draws each request's output"),
     (["--systems", ""], "systems: needs at least one system"),
     (["--systems", "tokenrouter", "--routers", ""], "routers: the routed systems need at least one router"),
     (["-n", ""], "concurrency: must be positive integers, got ''")],
)  # fmt: skip
def test_bad_or_empty_load_options_are_refused_one_line_exit_2(args: list[str], message: str) -> None:
    import typer
    from typer.testing import CliRunner

    from tokenrouter.commands.bench import bench

    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("scale", ["inf", "nan", "0"])
def test_a_length_scale_that_is_not_a_finite_positive_number_is_refused_exit_2(scale: str) -> None:
    import typer
    from typer.testing import CliRunner

    from tokenrouter.commands.bench import bench

    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, ["--lengths", "short-reasoning", "--length-scale", scale])
    assert result.exit_code == 2 and "Traceback" not in result.output
    last = result.output.strip().splitlines()[-1]
    assert last == f"error: --length-scale: must be > 0 and finite, got {float(scale)}"
