"""Operating points from sweep rows, and the results table."""

from __future__ import annotations

from trserve.quality.report import cheapest, markdown_table, operating_point


def _row(name: str, share: float, accuracy: float, rel: float, **params: float) -> dict[str, object]:
    return {"name": name, "program": name, "params": params, "large_share": share, "accuracy": accuracy,
            "relative_accuracy": rel, "exact_match": 0.5, "token_agreement": 0.7, "mean_logprob": -1.0,
            "mean_output_tokens": 9.0}  # fmt: skip


ROWS = [
    _row("large-only", 1.0, 0.98, 1.0, tau=0.0),
    _row("r2r", 0.4, 0.95, 0.97, threshold=0.1),
    _row("r2r", 0.2, 0.90, 0.92, threshold=0.3),
    _row("r2r", 0.1, 0.50, 0.51, threshold=0.7),
    _row("citer", 0.3, 0.80, 0.82, threshold=0.2),
]


def test_cheapest_point_reaching_the_target() -> None:
    assert cheapest(ROWS, "r2r", 0.9)["params"] == {"threshold": 0.3}  # type: ignore[index]
    assert cheapest(ROWS, "r2r", 0.95)["params"] == {"threshold": 0.1}  # type: ignore[index]
    assert cheapest(ROWS, "citer", 0.9) is None


def test_operating_point_records_what_was_measured() -> None:
    point = operating_point(ROWS[2], 0.9, "tokenrouter quality")
    assert point["program"] == "r2r" and point["params"] == {"threshold": 0.3}
    assert (point["large_share"], point["accuracy"], point["command"]) == (0.2, 0.9, "tokenrouter quality")


def test_markdown_table_has_a_line_per_row() -> None:
    table = markdown_table(ROWS)
    assert len(table.strip().splitlines()) == 2 + len(ROWS)
    assert "| r2r | threshold=0.3 | 20.0% | 90.0% |" in table
