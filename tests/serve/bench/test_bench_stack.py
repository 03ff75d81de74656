"""``tokenrouter bench --stack``: the routed systems get a second simulator prediction with the serving stack's
measured costs (a crossval probe's ``stack.json``). The expectations are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tokenrouter.commands.bench import bench
from trserve.bench.predict import sim_prediction
from trserve.crossval.stack import StackCosts

LATENCY_S = 0.006


def test_one_model_steps_once_per_latency_plus_host_gap() -> None:
    """One request on one model: a token per step, and the loop's host gap between steps: 1 / (L + h) tok/s."""
    tables = [[LATENCY_S] * 4]
    ideal = sim_prediction([[1.0]], [[1.0]], tables, 1, [1], "tokenrouter", 2000)
    gap = StackCosts(host_gap_s=(0.002,), handoff_transit_s=(0.0,))
    costly = sim_prediction([[1.0]], [[1.0]], tables, 1, [1], "tokenrouter", 2000, gap)
    assert ideal == pytest.approx(1 / LATENCY_S, rel=0.01)
    assert costly == pytest.approx(1 / (LATENCY_S + 0.002), rel=0.01)


def test_hand_off_transit_adds_to_every_move() -> None:
    """Two models, one request that alternates (P = [[0, 1], [1, 0]], every token kept): each token costs a step
    and a transit, so 1 / (L + t) tok/s."""
    P, C = [[0.0, 1.0], [1.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]]
    tables = [[LATENCY_S] * 2, [LATENCY_S] * 2]
    transit = StackCosts(host_gap_s=(0.0, 0.0), handoff_transit_s=(0.001, 0.001))
    costly = sim_prediction(P, C, tables, 1, [1, 1], "tokenrouter", 2000, transit)
    assert costly == pytest.approx(1 / (LATENCY_S + 0.001), rel=0.01)


def test_a_closed_loop_adds_the_clients_turnaround_between_requests() -> None:
    """One session of 4-token requests on one model (L = 6 ms), a 10 ms turnaround, a 2 ms host gap between
    back-to-back steps: a request is 4 steps and 3 gaps (its first step follows an idle model), then the
    turnaround, so 4 / (4 L + 3 g + t) tok/s; endless requests step back to back: 1 / (L + g)."""
    tables = [[LATENCY_S] * 4]
    costs = StackCosts(host_gap_s=(0.002,), handoff_transit_s=(0.0,), client_turnaround_s=0.010)
    closed = sim_prediction([[1.0]], [[1.0]], tables, 1, [1], "tokenrouter", 2000, costs, output_tokens=4)
    endless = sim_prediction([[1.0]], [[1.0]], tables, 1, [1], "tokenrouter", 2000, costs)
    assert closed == pytest.approx(4 / (4 * LATENCY_S + 3 * 0.002 + 0.010), rel=0.01)
    assert endless == pytest.approx(1 / (LATENCY_S + 0.002), rel=0.01)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "is not a file"), ({"host_gap_s": [0.001]}, "host_gap_s and handoff_transit_s"),
     ({"host_gap_s": [0.001], "handoff_transit_s": [0.001]}, "one value per model (2)")],
)  # fmt: skip
def test_a_bad_stack_file_is_one_line_exit_2(tmp_path: Path, content: dict | None, message: str) -> None:
    path = tmp_path / "stack.json"
    if content is not None:
        path.write_text(json.dumps(content))
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, ["--stack", str(path), "--no-direct"])
    assert result.exit_code == 2 and "--stack" in result.output and message in result.output, result.output
    assert "Traceback" not in result.output
