"""simulate's and sweep's flags refused by the simulator name the option the user typed (README: ``error: --option:
problem``, exit 2), not the library's parameter (``warmup_tokens:``, ``baseline:``, ``workload.preset:``,
``thresholds:``)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

runner = CliRunner()
BURSTY = str(Path(__file__).resolve().parents[2] / "trsim" / "scenarios" / "bursty.yaml")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["simulate", "--warmup-tokens", "-1"], "error: --warmup-tokens: must be >= 0 and below the token limit"),
        (["simulate", "--tokens", "100", "--warmup-tokens", "100"], "error: --warmup-tokens: must be >= 0 and below"),
        (["simulate", "--baseline", "foo"], "error: --baseline: unknown baseline 'foo'; valid: tokenrouter, b1"),
        # the baseline is checked before --thresholds is refused as the (unknown) baseline's to set
        (["simulate", "--baseline", "foo", "--thresholds", "2,1"], "error: --baseline: unknown baseline 'foo'"),
        (["simulate", "--thresholds", "9,9"], "error: --thresholds: [9, 9] at concurrency 16: sum of (B_i - 1)"),
        (["simulate", "--workload", "foo"], "error: --workload: workload.preset: unknown preset 'foo'"),
        (["simulate", "--scenario", BURSTY, "--workload", "foo"], "error: --workload: workload.preset: unknown"),
        (["sweep", "--workload", "foo", "-N", "2", "--thresholds", "1,1"], "error: --workload: workload.preset:"),
    ],
)
def test_simulate_and_sweep_name_the_option_typed(args, line):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(line) and len(result.output.strip().splitlines()) == 1, result.output
