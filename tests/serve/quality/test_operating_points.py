"""The committed operating points: made from the committed results, and used by the default config, the bench and
the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trcore.errors import ConfigError
from trserve.bench.systems import ROUTER_PARAMS
from trserve.server.defaults import DEFAULT_PROGRAM, default_config, load_operating_points, operating_point
from trserve.server.demo import operating_point_line

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "quality" / "quality.json"


def test_every_operating_point_is_a_row_of_the_committed_results() -> None:
    rows = json.loads(RESULTS.read_text())["rows"]
    points = load_operating_points()
    assert DEFAULT_PROGRAM in points
    for program, point in points.items():
        row = next(r for r in rows if r["name"] == program and r["params"] == point["params"])
        assert point["large_share"] == round(row["large_share"], 4)
        assert point["accuracy"] == round(row["accuracy"], 4)
        assert point["relative_accuracy"] >= point["target_relative_accuracy"]
        assert all("Paris" in a for a in point["probe_answers"].values())


#: The committed operating points' parameters, written out here (models/local-smollm2/operating_points.json,
#: docs/quality.md): what the default config and the bench must route at.
COMMITTED = {"rstitch": {"tau": 4.0, "tau_back": 0.0}, "r2r": {"threshold": 0.25}, "citer": {"threshold": 0.55}}


def test_default_config_and_bench_route_at_the_operating_points() -> None:
    assert {program: load_operating_points()[program]["params"] for program in COMMITTED} == COMMITTED
    assert default_config().router.program == DEFAULT_PROGRAM == "rstitch"
    assert default_config().router.params == COMMITTED["rstitch"]
    for program, params in COMMITTED.items():
        assert ROUTER_PARAMS[program] == params, program


def test_operating_point_reads_the_file_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "points.json"
    path.write_text(json.dumps({"r2r": {"params": {"threshold": 0.5}, "large_share": 0.4, "accuracy": 0.7}}))
    assert operating_point("r2r", path) == {"params": {"threshold": 0.5}, "large_share": 0.4, "accuracy": 0.7}
    with pytest.raises(ConfigError, match=r"no operating point for 'citer' in .*points\.json"):
        operating_point("citer", path)


def test_demo_names_the_operating_point_or_says_there_is_none() -> None:
    cfg = default_config()
    point = operating_point(DEFAULT_PROGRAM)
    assert f"{point['large_share']:.1%} of tokens on the large model" in operating_point_line(cfg)
    other = cfg.model_copy(update={"router": cfg.router.model_copy(update={"params": {"tau": 9.0}})})
    assert "no measured operating point" in operating_point_line(other)
