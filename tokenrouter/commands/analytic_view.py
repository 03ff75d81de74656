"""How `tokenrouter throughput` and `tokenrouter optimize` show their answers: a rich table, or one JSON object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trcore.throughput import OptimizeResult, ThroughputResult


def result_dict(result: ThroughputResult) -> dict[str, Any]:
    """Thresholds, throughput and its standard error (0.0 when solved exactly)."""
    return {
        "thresholds": list(result.thresholds),
        "throughput_tok_s": result.throughput_tok_s,
        "std_error_tok_s": result.std_error_tok_s,
    }


def optimize_dict(result: OptimizeResult, ranked: list[ThroughputResult]) -> dict[str, Any]:
    return {
        "thresholds": list(result.thresholds),
        "throughput_tok_s": result.throughput_tok_s,
        "candidates": [result_dict(c) | {"num_states": c.num_states} for c in ranked],
        "elapsed_s": result.elapsed_s,
        "method": result.method,
    }


def print_throughput(result: ThroughputResult, num_requests: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"Throughput model, {num_requests} concurrent requests")
    table = Table()
    for name in ("thresholds", "tok/s", "states"):
        table.add_column(name, justify="right")
    table.add_row(vector_text(result.thresholds), rate_text(result), states_text(result))
    console.print(table)


def print_optimize(result: OptimizeResult, ranked: list[ThroughputResult], num_requests: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    total_states = sum(c.num_states for c in ranked)
    console.print(
        f"{len(ranked)} feasible threshold vectors, {num_requests} concurrent requests, best first ({result.method})"
    )
    table = Table()
    for name in ("", "thresholds", "tok/s", "vs best", "states"):
        table.add_column(name, justify="right")
    for c in ranked:
        is_best = c.thresholds == result.thresholds
        table.add_row(
            "best" if is_best else "",
            vector_text(c.thresholds),
            rate_text(c),
            share_text(c.throughput_tok_s, result.throughput_tok_s),
            states_text(c),
            style="bold green" if is_best else None,
        )
    console.print(table)
    work = f"{total_states} states over all candidates" if result.method == "exact" else "sampled"
    best = next((c for c in ranked if c.thresholds == result.thresholds), None)
    rate = rate_text(best) if best else f"{result.throughput_tok_s:.2f}"
    console.print(f"best thresholds {vector_text(result.thresholds)}: {rate} tok/s ({work}, {result.elapsed_s:.2f} s)")


def share_text(rate: float, best: float) -> str:
    """``rate`` as a share of the best's; "-" where the best commits nothing (a C of zeros, say)."""
    return f"{rate / best:.1%}" if best > 0 else "-"


def rate_text(result: ThroughputResult) -> str:
    """Tokens per second, with the standard error of a sampled value."""
    if result.std_error_tok_s > 0:
        return f"{result.throughput_tok_s:.2f} ± {result.std_error_tok_s:.2f}"
    return f"{result.throughput_tok_s:.2f}"


def states_text(result: ThroughputResult) -> str:
    return str(result.num_states) if result.num_states else "-"


def vector_text(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)
