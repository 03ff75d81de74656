"""A bad device, shape, dtype or tp on the command line is refused in one line naming the option the user typed
(README: ``error: --option: problem``, exit 2), not the library's parameter (``hardware:``, ``shape:``)."""

import pytest
from typer.testing import CliRunner

from tokenrouter.cli import app

runner = CliRunner()
VALID_SHAPES = "valid: DeepSeek-R1-Distill-Qwen-1.5B"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["latency", "--hardware", "nope", "--shape", "Qwen3-8B"], "error: --hardware: unknown hardware 'nope'"),
        (["latency", "--hardware", "a100-80g", "--shape", "Nope"], "error: --shape: unknown shape 'Nope'"),
        (["latency", "--hardware", "a100-80g", "--shape", "Qwen3-8B", "--dtype", "fp9"], "error: --dtype: unknown"),
        (["latency", "--hardware", "cpu-2core", "--shape", "Qwen3-0.6B", "--tp", "2"], "error: --tp: cpu-2core has"),
        (["plan", "--hardware", "nope"], "error: --hardware: unknown hardware 'nope'"),
        (["plan", "--models", "a=Nope,b=Qwen3-8B"], "error: --models: shape: unknown shape 'Nope'"),
        (["plan", "--models", "a=Qwen3-8B,b=Nope"], "error: --models: shape: unknown shape 'Nope'"),
    ],
)
def test_latency_and_plan_name_the_option_typed(args, line):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(line) and len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("command", ["throughput", "optimize", "simulate"])
@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("roofline:a100-80g:Nope:tp1", "shape: unknown shape 'Nope'; " + VALID_SHAPES),
        ("roofline:nope:Qwen3-8B", "hardware: unknown hardware 'nope'"),
        ("roofline:a100-80g:Qwen3-8B:tp0", "tp: must be an integer >= 1, got 0"),
        ("roofline:a100-80g:Qwen3-8B:fp9", "dtype: unknown dtype 'fp9'"),
        ("roofline:a100", "latency: expected roofline:<hardware>:<shape>"),
        ("roofline:a100-80g:Qwen3-8B:tp3", "tp: Qwen3-8B: tp 3 does not split its 32 attention heads"),  # as --tp
        ("roofline:a100-80g:Qwen3-8B:tp²", "dtype: unknown dtype 'tp²'"),  # '²' is a digit to str, not to int()
    ],
)
def test_a_bad_roofline_spec_names_latency_ms(command, spec, problem):
    result = runner.invoke(app, [command, "--latency-ms", f"{spec},6"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --latency-ms: {problem}"), result.output
