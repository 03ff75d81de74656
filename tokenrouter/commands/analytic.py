"""`tokenrouter throughput` and `tokenrouter optimize`: the analytic throughput model from the command line.

Routing statistics and latencies default to a model pair's (``--pair``; the R2R paper's pair when none is named),
so `tokenrouter optimize` alone tunes its delayed-batching thresholds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from tokenrouter import options as opt
from tokenrouter.commands.analytic_view import optimize_dict, print_optimize, print_throughput, result_dict
from tokenrouter.errors import cli_errors, named_as_options
from trcore.errors import ConfigError, NotIrreducibleError
from trcore.routers import validate_keep_matrix

if TYPE_CHECKING:
    from trcore.throughput import ThroughputModel

#: The model's field names and the options that set them, so errors name what the user typed.
OPTION_OF = {
    "P": "--P",
    "C": "--C",
    "latency_s": "--latency-ms",
    "quantum_s": "--quantum-ms",
    "max_batch": "--max-batch",
    "concurrency": "--concurrency",
    "thresholds": "--thresholds",
    "workers": "--workers",
    "min_gain": "--min-gain",
    "method": "--method",
    "seed": "--seed",
}

P_OPTION = typer.Option(None, "--P", help="Routing matrix P (rows sum to 1): JSON or 'a,b;c,d' [the pair's].")
C_OPTION = typer.Option(None, "--C", help="Committed tokens per request-step and transition (C) [the pair's].")
PAIR_OPTION = typer.Option(opt.ANALYTIC_PAIR, "--pair", help=opt.PAIR_HELP)
LATENCY_OPTION = typer.Option(
    None,
    "--latency-ms",
    help="Step latency per model in ms [the pair's]: '6.0,27.9', JSON with per model a number or a list by batch "
    "size - 1, or roofline specs, comma-separated: 'roofline:a100-80g:DeepSeek-R1-Distill-Qwen-32B:tp2' "
    "(tokenrouter latency).",
)
QUANTUM_OPTION = typer.Option("0.1", "--quantum-ms", help="Time grid in ms; latencies are rounded to it.")
CONCURRENCY_OPTION = typer.Option(str(opt.DEFAULT_CONCURRENCY), "--concurrency", help="Closed-loop requests N.")
MAX_BATCH_OPTION = typer.Option(None, "--max-batch", help="Max batch per model, e.g. '8,4' (default: no cap).")
JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object instead of a table.")
METHOD_OPTION = typer.Option(
    "exact",
    "--method",
    help="exact (the Markov chain), sampled (Monte Carlo of the same process, for large N) or auto.",
)
#: ``optimize`` answers at production concurrency by default: exact while the chain is cheap, sampled beyond.
OPTIMIZE_METHOD_OPTION = typer.Option(
    "auto",
    "--method",
    help="auto (exact while the chain is cheap, else sampled), exact (the Markov chain) or sampled.",
)
SEED_OPTION = typer.Option(0, "--seed", help="Seed of the sampled method (same seed, same numbers).")


@cli_errors
def throughput(
    P: str | None = P_OPTION,
    C: str | None = C_OPTION,
    latency_ms: str | None = LATENCY_OPTION,
    pair: str = PAIR_OPTION,
    quantum_ms: str = QUANTUM_OPTION,
    concurrency: str = CONCURRENCY_OPTION,
    thresholds: str | None = typer.Option(None, "--thresholds", help="B_i per model, e.g. '2,10' (default: 1s)."),
    max_batch: str | None = MAX_BATCH_OPTION,
    method: str = METHOD_OPTION,
    seed: int = SEED_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Long-run committed tokens per second of one threshold vector."""
    P, C, latency_ms = opt.pair_defaults(pair, P, C, latency_ms)
    model, num_requests = _model(P, C, latency_ms, quantum_ms, concurrency, max_batch, seed)
    vector = opt.parse_thresholds(thresholds, model.num_models) if thresholds else [1] * model.num_models
    for i, (b, cap) in enumerate(zip(vector, model.spec.max_batch, strict=True)):
        if cap is not None and b > cap:  # the chain would run it as the cap, under this vector's name
            raise ConfigError("--thresholds", f"model {i}'s {b} is above its --max-batch {cap}")
    with _named_fields():
        result = model.solve(num_requests, vector, method=method)
    if as_json:
        print(json.dumps(result_dict(result) | {"num_states": result.num_states, "method": result.method}))
    else:
        print_throughput(result, num_requests)


@cli_errors
def optimize(
    P: str | None = P_OPTION,
    C: str | None = C_OPTION,
    latency_ms: str | None = LATENCY_OPTION,
    pair: str = PAIR_OPTION,
    quantum_ms: str = QUANTUM_OPTION,
    concurrency: str = CONCURRENCY_OPTION,
    max_batch: str | None = MAX_BATCH_OPTION,
    workers: str = typer.Option("1", "--workers", help="Processes solving candidates in parallel."),
    min_gain: float = typer.Option(0.0, "--min-gain", help="Prefer thresholds of 1 unless the best gains more."),
    method: str = OPTIMIZE_METHOD_OPTION,
    seed: int = SEED_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Solve every feasible threshold vector and print the best and the table of candidates."""
    P, C, latency_ms = opt.pair_defaults(pair, P, C, latency_ms)
    model, num_requests = _model(P, C, latency_ms, quantum_ms, concurrency, max_batch, seed)
    num_workers = _integer(workers, "--workers")
    with _named_fields():
        result = model.optimize(
            num_requests, clock=time.perf_counter, workers=num_workers, min_gain=min_gain, method=method
        )
    ranked = sorted(result.candidates, key=lambda c: -c.throughput_tok_s)
    if as_json:
        print(json.dumps(optimize_dict(result, ranked)))
    else:
        print_optimize(result, ranked, num_requests)


def _model(
    P: str, C: str, latency_ms: str, quantum_ms: str, concurrency: str, max_batch: str | None, seed: int = 0
) -> tuple[ThroughputModel, int]:
    from trcore.throughput import SamplingConfig, ThroughputModel

    p = opt.parse_matrix(P, "--P")
    c = opt.parse_matrix(C, "--C")
    num_models = opt.check_same_size([p, c], ["--P", "--C"])
    quantum = _positive(quantum_ms, "--quantum-ms")
    latency = parse_latency_spec(latency_ms, num_models, quantum)
    num_requests = _integer(concurrency, "--concurrency")
    caps = opt.parse_ints(max_batch, "--max-batch") if max_batch else None
    if caps is not None and len(caps) != num_models:
        raise ConfigError("--max-batch", f"needs {num_models} values (one per model), got {len(caps)}")
    with _named_fields():
        validate_keep_matrix(c, num_models)  # the simulator cannot run C > 1: both tools refuse it alike
        model = ThroughputModel(p, c, latency, quantum_s=quantum / 1000, max_batch=caps, sampling=SamplingConfig(seed))
    return model, num_requests


#: Batch sizes a roofline entry is tabulated for in the throughput model (larger batches use the last entry), and
#: the context per request it is read at (the roofline's own reference point, docs/planning.md).
ROOFLINE_TABLE_SIZE = 256
ROOFLINE_CONTEXT = 1024


def parse_latency_spec(
    text: str, num_models: int, quantum_ms: float, as_models: bool = False
) -> list[float | list[float] | Any]:
    """Per-model latencies in ms (``6.0,27.9`` or JSON with numbers or lists by batch size - 1), in seconds; an
    entry may also be a roofline spec (``roofline:a100-80g:DeepSeek-R1-Distill-Qwen-32B:tp2``): the model itself
    when ``as_models`` (the simulator reads its context and extend terms), else its table by batch size at
    :data:`ROOFLINE_CONTEXT` tokens of context per request."""
    option = "--latency-ms"
    text = text.strip()
    if "roofline:" in text and not text.startswith("["):
        entries = [e.strip() for e in text.split(",")]
        if len(entries) != num_models:
            raise ConfigError(option, f"needs {num_models} entries (one per model, like P), got {len(entries)}")
        return [_roofline_or_number(e, i, quantum_ms, as_models) for i, e in enumerate(entries)]
    if text.startswith("["):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(option, f"invalid JSON ({exc.msg}): {text!r}") from None
        if not isinstance(raw, list):
            raise ConfigError(option, "expected a JSON list with one entry per model")
        entries: list[Any] = raw
    else:
        entries = opt.parse_vector(text, option)
    if len(entries) != num_models:
        raise ConfigError(option, f"needs {num_models} entries (one per model, like P), got {len(entries)}")
    return [_latency_entry(entry, i, quantum_ms) for i, entry in enumerate(entries)]


def _roofline_or_number(entry: str, model: int, quantum_ms: float, as_models: bool) -> float | list[float] | Any:
    if not entry.startswith("roofline:"):
        return _latency_entry(opt.parse_vector(entry, "--latency-ms")[0], model, quantum_ms)
    from trsim.roofline import parse_roofline_spec

    with named_as_options("latency", "hardware", "shape", "tp", "dtype", option="--latency-ms"):
        roofline = parse_roofline_spec(entry)
    if as_models:
        return roofline
    table = [1000 * roofline.predict(b, b * ROOFLINE_CONTEXT, 0) for b in range(1, ROOFLINE_TABLE_SIZE + 1)]
    return _latency_entry(table, model, quantum_ms)


def _latency_entry(entry: object, model: int, quantum_ms: float) -> float | list[float]:
    option = "--latency-ms"
    table = entry if isinstance(entry, list) else [entry]
    if not table or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in table):
        raise ConfigError(option, f"model {model}: expected a number or a non-empty list of numbers, got {entry!r}")
    for x in table:
        if not (0 < x < math.inf):
            raise ConfigError(option, f"model {model}: latencies must be positive, got {x}")
        if x / quantum_ms < 0.5:
            raise ConfigError("--quantum-ms", f"{quantum_ms} ms is too coarse for model {model}'s {x} ms latency")
    seconds = [x / 1000 for x in table]
    return seconds if isinstance(entry, list) else seconds[0]


def _integer(text: str, option: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(option, f"expected an integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(option, f"must be >= 1, got {value}")
    return value


def _positive(text: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(option, f"expected a number, got {text!r}") from None
    if not 0 < value < math.inf:
        raise ConfigError(option, f"must be a positive number, got {text!r}")
    return value


@contextmanager
def _named_fields() -> Iterator[None]:
    """Re-raise the model's errors under the option names; a chain with several closed classes is bad input."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(OPTION_OF.get(exc.field, exc.field), exc.problem) from None
    except NotIrreducibleError as exc:
        raise ConfigError("--P", str(exc)) from None
