"""``C > 1`` is refused, identically, by ``tokenrouter throughput`` and ``tokenrouter simulate`` (same flags, same
system): one line naming the entry, exit status 2, no traceback. (The throughput model's Python interface still
takes C > 1 as expected committed tokens per transition; the simulator cannot run that, so the tools refuse it.)"""

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app
from trcore import ConfigError
from trcore.routers import MarkovRouter

FLAGS = ["--P", "0.65,0.35;1,0", "--C", "1,1.5;1,0", "--latency-ms", "6,27.9", "--concurrency", "4"]


@pytest.mark.parametrize("command", [["throughput", "--thresholds", "1,1"], ["simulate", "--tokens", "200"]])
def test_both_tools_refuse_c_above_one_in_the_same_words(command):
    result = CliRunner().invoke(app, [*command, *FLAGS])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0] == (
        "error: --C: "
        "C[0][1] = 1.5 exceeds 1; C is the chance a step's token is kept (at most one "
        "committed token per step), so every entry must lie in [0, 1]"
    )


def test_the_simulators_routers_refuse_it_instead_of_clamping():
    with pytest.raises(ConfigError, match=r"C\[0\]\[1\] = 1.5 exceeds 1"):
        MarkovRouter(0, 2, [[0.65, 0.35], [1, 0]], [[1.0, 1.5], [1.0, 0.0]], seed=0)
