"""`tokenrouter plan`'s table of the large model alone beside the routed plans, and where routing stops paying."""

from __future__ import annotations

from typing import Any


def print_alone(result: dict[str, Any], console: Any) -> None:
    """Routed and large-alone placements ranked together, then per concurrency the best of each, their ratio
    and the break-even large-model share, then the verdict."""
    from rich.table import Table

    ranked = Table(title="routed and the large model alone, best throughput first")
    for col in ("placement", "system", "GPUs", "N", "tok/s", "tok/s/GPU", "max req/s"):
        ranked.add_column(col, justify="right", no_wrap=col == "placement")
    for r in result["ranking"]:
        ranked.add_row(r["label"], r["system"], str(r["num_gpus"]), str(r["concurrency"]),
                       f"{r['throughput_tok_s']:.0f}", f"{r['throughput_per_gpu_tok_s']:.0f}",
                       rate_text(r))  # fmt: skip
    console.print(ranked)
    pays = result["routing_pays"]
    cells = Table(title=f"when not to route (the pair's large-model share {pays['pair_large_share']:.3f})")
    for col in ("N", "best routed", "tok/s", "large alone", "tok/s", "routed/alone", "break-even share"):
        cells.add_column(col, justify="right")
    for c in pays["by_concurrency"]:
        share = c["break_even_share"]
        cells.add_row(str(c["concurrency"]), c["routed"], f"{c['routed_tok_s']:.0f}", c["alone"],
                      f"{c['alone_tok_s']:.0f}", f"{c['routed_over_alone']:.2f}",
                      "-" if share is None else f"{share:.3f}")  # fmt: skip
    if pays["by_concurrency"]:  # none where the pair fits no placement
        console.print(cells)
    console.print(pays["verdict"])


def rate_text(row: dict[str, Any]) -> str:
    """A placement's Poisson capacity: ``-`` not searched, ``none`` no rate tried met the targets, ``>=`` the
    search's raises ran out before a rate failed."""
    rate = row["max_rate_rps"]
    if rate is None:
        return "-"
    if rate == 0:
        return "none"
    return f"{'' if row.get('upper_failed', True) else '>='}{rate:.2f}"
