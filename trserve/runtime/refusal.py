"""An engine that refuses its model's settings at start-up, reported in the serve config's words.

vLLM checks a model's settings only when its engine starts, in the worker process, and raises ``ValueError`` with
advice in its own terms (``gpu_memory_utilization``, environment variables). The worker turns that into a
:class:`~trcore.ConfigError` naming the serve config's field (:func:`settings_error`), logs the traceback, writes
one marked line (:func:`announce`) and exits with :data:`EXIT_STATUS`; the launcher finds the line in the log's
tail (:func:`find`) and the command stops with that one line and exit status 2, as for any other bad setting.
"""

from __future__ import annotations

import json
import re
import sys

from trcore.errors import ConfigError

#: A worker's exit status when its engine refused the model's settings (the command's own status for bad input).
EXIT_STATUS = 2
MARK = "tokenrouter-settings-refused "

KV_TOO_SMALL = re.compile(
    r"max seq len \((?P<max_len>\d+)\), \((?P<needed>[\d.]+) GiB KV cache is needed.*?"
    r"available KV cache memory \((?P<available>[\d.]+) GiB\)\.(?: Based on the available memory, the estimated "
    r"maximum model length is (?P<fits>\d+)\.)?",
    re.S,
)
LONGER_THAN_MODEL = re.compile(
    r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived max_model_len "
    r"\((?P<key>\w+)=(?P<derived>\d+)"
)


def settings_error(exc: ValueError, model: int) -> ConfigError:
    """``exc``, raised by model ``model``'s engine as it started, as an error on the serve config field at fault."""
    text = str(exc)
    if kv := KV_TOO_SMALL.search(text):
        holds = f"holds {kv['fits']} tokens" if kv["fits"] else "holds no whole request"
        return ConfigError(
            f"models.{model}.kv_cache_gib",
            f"{kv['available']} GiB {holds} of this model's KV, less than its max_model_len {kv['max_len']} "
            f"({kv['needed']} GiB needed): raise kv_cache_gib or lower max_model_len",
        )
    if long := LONGER_THAN_MODEL.search(text):
        return ConfigError(
            f"models.{model}.max_model_len",
            f"{long['asked']} is more than the checkpoint's {long['key']} ({long['derived']}); lower it",
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return ConfigError(f"models.{model}", f"the engine refused the model's settings: {first}")


def announce(error: ConfigError) -> None:
    """Write ``error`` as the marked line the launcher looks for (on stderr, the worker's log)."""
    print(MARK + json.dumps({"field": error.field, "problem": error.problem}), file=sys.stderr, flush=True)


def find(log_tail: str) -> ConfigError | None:
    """The refusal a worker announced in ``log_tail``, if any (the last one)."""
    for line in reversed(log_tail.splitlines()):
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            said = json.loads(line[at + len(MARK) :])
            return ConfigError(str(said["field"]), str(said["problem"]))
        except (ValueError, KeyError, TypeError):
            return None
    return None
