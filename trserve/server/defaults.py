"""The embedded default serve config: the local CPU pair from ``tokenrouter models prepare``, routed by rstitch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trcore import PROGRAMS
from trserve.config import ServeConfig

log = logging.getLogger(__name__)

#: R-Stitch's entropy thresholds (nats, exact entropy) for the local pair: the small model with its fitted head is
#: uncertain (its entropy is often above 5 nats), so both thresholds sit high. Replaying rstitch with both engines
#: over the bench's eight prompts x 32 greedy tokens (``benchmarks/tune_rstitch.py``) put 20% of the tokens on the
#: large model with plain prompts and 29% with chat-formatted ones (the aim is 10-35%).
LOCAL_PAIR_RSTITCH: dict[str, float] = {"tau": 6.0, "tau_back": 5.0}

#: Model 0 (entry) is the small layer-cut model, model 1 the full SmolLM2-135M-Instruct.
DEFAULT_CONFIG: dict[str, Any] = {
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
    "router": {"program": "rstitch", "params": dict(LOCAL_PAIR_RSTITCH)},
    "batching": {"thresholds": [1, 1], "max_wait_ms": 20.0},
    "server": {"host": "127.0.0.1", "port": 8000, "served_model_name": "tokenrouter"},
}

#: The router of the default config where ``rstitch`` is not registered (a trimmed installation).
MARKOV_FALLBACK: dict[str, Any] = {"program": "markov", "params": {"P": [[0.8, 0.2], [0.5, 0.5]], "seed": 0}}


def default_config(report: Callable[[str], None] | None = None) -> ServeConfig:
    """The default config. Its router is ``rstitch``; where that program is not registered it is ``markov``
    (:data:`MARKOV_FALLBACK`). Either way one line to ``report`` (default: this module's log) says which router
    was picked and why, so the switch is never silent."""
    say = report or log.info
    data = dict(DEFAULT_CONFIG)
    if "rstitch" in PROGRAMS.names():
        say(f"default config: router rstitch {LOCAL_PAIR_RSTITCH} (entropy thresholds tuned for the local pair)")
    else:
        data["router"] = MARKOV_FALLBACK
        say(
            f"default config: router markov {MARKOV_FALLBACK['params']} instead of rstitch, because no program "
            f"named rstitch is registered here (registered: {', '.join(PROGRAMS.names())})"
        )
    return ServeConfig.model_validate(data)
