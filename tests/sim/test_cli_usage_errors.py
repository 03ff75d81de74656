"""Click's own usage errors through the console entry point: one line naming the problem, exit status 2, no
traceback and no usage block; `tokenrouter` alone still shows its help."""

from __future__ import annotations

import subprocess
import sys

import pytest


def tokenrouter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenrouter", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("simulate", "--bogus"), "No such option: --bogus (see 'tokenrouter simulate --help')"),
        (("simulate", "-N", "abc"), "Invalid value for '--concurrency'"),
        (("nope",), "No such command 'nope'"),
        (("models", "nope"), "(see 'tokenrouter models --help')"),
        (("plan", "--gpus"), "Option '--gpus' requires an argument"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args, words):
    result = tokenrouter(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


def test_the_command_alone_shows_its_help_and_help_exits_0():
    alone = tokenrouter()
    assert alone.returncode == 2 and "Usage: tokenrouter [OPTIONS] COMMAND" in alone.stdout + alone.stderr
    helped = tokenrouter("simulate", "--help")
    assert helped.returncode == 0 and "Usage: tokenrouter simulate" in helped.stdout
