"""`tokenrouter optimize` on a system that commits no tokens (C all zero: every candidate's T(B) is 0) printed a
ZeroDivisionError traceback from its "vs best" column; the table now shows "-" there, exit 0."""

from typer.testing import CliRunner

from tokenrouter.cli import app


def test_optimize_prints_its_table_when_the_best_throughput_is_zero():
    args = ["optimize", "--P", "0.65,0.35;1,0", "--C", "0,0;0,0", "--latency-ms", "6,27.9", "--concurrency", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    assert "best thresholds 1,1: 0.00 tok/s" in result.output
    rows = [line for line in result.output.splitlines() if " 1,2 " in line or " 2,1 " in line]
    assert len(rows) == 2 and all("│       - │" in row for row in rows)
