"""`tokenrouter simulate --thresholds` above the closed loop's N: the policy runs such a threshold as N, so B = 20
at N = 16 ran (16, 1) and reported [20, 1]; `tokenrouter throughput` refuses it. Both refuse it alike now."""

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

FLAGS = ["--P", "0.65,0.35;1,0", "--C", "1,0;1,0", "--latency-ms", "6,27.9", "--concurrency", "8"]


@pytest.mark.parametrize("command", [["simulate", "--tokens", "200"], ["throughput"]])
def test_a_threshold_above_the_concurrency_is_refused_by_both_tools(command):
    result = CliRunner().invoke(app, [*command, *FLAGS, "--thresholds", "1,9"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "error: --thresholds: B_1 = 9 must be within 1..8 (the concurrency)"


def test_a_threshold_of_the_concurrency_still_runs():
    result = CliRunner().invoke(app, ["simulate", "--tokens", "200", *FLAGS, "--thresholds", "1,8", "--json"])
    assert result.exit_code == 0, result.output
