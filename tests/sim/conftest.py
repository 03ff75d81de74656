"""Shared builders for simulator tests."""

from __future__ import annotations

import pytest

from trsim import markov_config

R2R_P = [[0.65, 0.35], [1.0, 0.0]]
R2R_C = [[1.0, 0.0], [1.0, 0.0]]


@pytest.fixture
def r2r():
    """The R2R-like pair with constant latencies, endless requests: ``r2r(thresholds, concurrency, **kw)``."""

    def build(thresholds=(1, 1), concurrency=8, workload="endless", latency=(0.006, 0.0279), **kw):
        return markov_config(R2R_P, R2R_C, list(latency), list(thresholds), concurrency, workload, **kw)

    return build
