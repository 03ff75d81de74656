"""The embedded default serve config: the local CPU pair from ``tokenrouter models prepare``, routed by rstitch at
its operating point; and the default config of any other pair (``tokenrouter serve --pair NAME``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trcore import PROGRAMS
from trcore.errors import ConfigError
from trserve.config import ServeConfig
from trsim.pairs import LOCAL_PAIR, load_pair

log = logging.getLogger(__name__)

#: R-Stitch's entropy thresholds (nats, exact entropy) for the local pair: the small model with its fitted head is
#: uncertain (its entropy is often above 5 nats), so both thresholds sit high. Replaying rstitch with both engines
#: over the bench's eight prompts x 32 greedy tokens (``benchmarks/tune_rstitch.py``) put 20% of the tokens on the
#: large model with plain prompts and 29% with chat-formatted ones (the aim is 10-35%).
LOCAL_PAIR_RSTITCH: dict[str, float] = {"tau": 6.0, "tau_back": 5.0}

#: Operating points of the local pair measured by ``tokenrouter quality`` on the held-out question set, keyed by
#: program: parameters, large-model token share, accuracy, and the command that made them (docs/quality.md).
OPERATING_POINTS: Path = load_pair(LOCAL_PAIR).operating_points_path() or Path("operating_points.json")
#: The default config's routing program; its parameters are its committed operating point.
DEFAULT_PROGRAM = "rstitch"


def load_operating_points(path: Path = OPERATING_POINTS) -> dict[str, Any]:
    """The committed operating points, keyed by program (empty when the file is absent)."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    return data


def operating_point(program: str, path: Path = OPERATING_POINTS) -> dict[str, Any]:
    """The committed operating point of ``program``; a ConfigError says how to make one when there is none."""
    points = load_operating_points(path)
    if program not in points:
        raise ConfigError(
            "operating_points",
            f"no operating point for {program!r} in {path}; make one with `tokenrouter quality --program "
            f"{program} --target-accuracy 0.9 --save-operating-point`",
        )
    point: dict[str, Any] = points[program]
    return point


#: Model 0 (entry) is the small layer-cut model, model 1 the full SmolLM2-135M-Instruct.
DEFAULT_CONFIG: dict[str, Any] = {
    "pair": LOCAL_PAIR,
    "mode": "routed",
    "handoff": "session",
    "models": [
        {
            "name": "small",
            "path": "prepared:small",
            "dtype": "float32",
            "max_model_len": 2048,
            "block_size": 32,
            "kv_cache_gib": 1.0,
            "max_num_seqs": 64,
        },
        {
            "name": "large",
            "path": "prepared:large",
            "dtype": "float32",
            "max_model_len": 2048,
            "block_size": 32,
            "kv_cache_gib": 1.0,
            "max_num_seqs": 64,
        },
    ],
    "entry_model": 0,
    "router": {"program": DEFAULT_PROGRAM, "params": dict(operating_point(DEFAULT_PROGRAM)["params"])},
    "batching": {"thresholds": [1, 1], "max_wait_ms": 20.0},
    "server": {"host": "127.0.0.1", "port": 8000, "served_model_name": "tokenrouter"},
}

#: The router of the default config where ``rstitch`` is not registered (a trimmed installation).
MARKOV_FALLBACK: dict[str, Any] = {"program": "markov", "params": {"P": [[0.8, 0.2], [0.5, 0.5]], "seed": 0}}


def default_config(report: Callable[[str], None] | None = None, pair: str = LOCAL_PAIR) -> ServeConfig:
    """The default config of ``pair``: for the local pair, its prepared checkpoints routed by ``rstitch``; where
    that program is not registered ``markov`` (:data:`MARKOV_FALLBACK`). Either way one line to ``report``
    (default: this module's log) says which router was picked and why, so the switch is never silent. Another
    pair: :func:`emulated_pair_config`."""
    say = report or log.info
    if pair != LOCAL_PAIR:
        return emulated_pair_config(pair, say)
    data = dict(DEFAULT_CONFIG)
    if "rstitch" in PROGRAMS.names():
        point = operating_point(DEFAULT_PROGRAM)
        say(
            f"default config: router rstitch {point['params']} (operating point: {point['large_share']:.0%} of "
            f"tokens on the large model, accuracy {point['relative_accuracy']:.0%} of large-only's)"
        )
    else:
        data["router"] = MARKOV_FALLBACK
        say(
            f"default config: router markov {MARKOV_FALLBACK['params']} instead of rstitch, because no program "
            f"named rstitch is registered here (registered: {', '.join(PROGRAMS.names())})"
        )
    return ServeConfig.model_validate(data)


def emulated_pair_config(name: str, report: Callable[[str], None]) -> ServeConfig:
    """A pair without checkpoints here, served on emulated engines at its latencies and routed by ``markov`` with
    its routing statistics (both filled in from ``pair.yaml``); a pair lacking either is an error."""
    pair = load_pair(name)
    latency, stats = pair.spec.latency(), pair.spec.routing_stats()
    if latency is None or stats is None:
        lacks = " and ".join(x for x, v in (("latencies", latency), ("routing statistics", stats)) if v is None)
        raise ConfigError("pair", f"{name} has no checkpoints here and no {lacks} to emulate; give --config")
    report(
        f"default config of pair {name}: emulated engines at {latency.hardware} latencies {latency.ms} "
        f"({latency.source}); markov routing ({stats.source})"
    )
    data = {
        "pair": name,
        "backend": "emulated",
        "models": [{"name": m.name} for m in pair.spec.models],
        "router": {"program": "markov", "params": {"seed": 0}},
        "batching": {"thresholds": [1] * len(pair.spec.models), "max_wait_ms": 20.0},
    }
    return ServeConfig.model_validate(data)


def pair_operating_point(pair: str, program: str) -> dict[str, Any]:
    """The operating point of ``program`` on ``pair``; a pair without one is an error naming the pair."""
    path = load_pair(pair).operating_points_path()
    if path is None:
        raise ConfigError("operating_points", f"pair {pair} has no operating points (`tokenrouter quality --pair`)")
    load_pair(pair).operating_points()  # refuses points that name another pair
    return operating_point(program, path)
