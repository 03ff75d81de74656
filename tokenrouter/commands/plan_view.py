"""`tokenrouter plan`'s tables: the placements, their memory bounds, and the large model alone beside them."""

from __future__ import annotations

from typing import Any

from tokenrouter.commands.plan_alone import rate_text


def print_table(result: dict[str, Any]) -> None:
    """The placements best first, the best of each kind, each one's memory bound, and the large model alone."""
    from rich.console import Console
    from rich.table import Table

    if not result["placements"]:  # the pair fits no placement: the large model alone only
        from tokenrouter.commands.plan_alone import print_alone

        print_alone(result, Console())
        return
    names = list(result["config"]["models"])
    table = Table(title=f"plan ({result['elapsed_s']:.0f} s), best first")
    for col in ("placement", "GPUs", *(f"{n} gpus/tp" for n in names), "N", "B", "tok/s", "tok/s/GPU", "sim tok/s",
                "max req/s"):  # fmt: skip
        table.add_column(col, justify="right", no_wrap=col == "placement")
    for p in result["placements"]:
        per_model = [f"{p['models'][n]['gpus']}/{p['models'][n]['tp']}" for n in names]
        sim = p["sim_throughput_tok_s"]
        table.add_row(p["label"], str(p["num_gpus"]), *per_model, str(p["concurrency"]),
                      ",".join(map(str, p["thresholds"])), f"{p['throughput_tok_s']:.0f}",
                      f"{p['throughput_per_gpu_tok_s']:.0f}", "-" if sim is None else f"{sim:.0f}",
                      rate_text(p))  # fmt: skip
    console = Console()
    console.print(table)
    best = result["best"]
    capacity = best["max_rate"] or "none: no rate tried meets the latency targets"
    if not any(p["max_rate_rps"] is not None for p in result["placements"]):
        capacity = "not searched (--open-loop-top 0)"
    console.print(f"best throughput {best['throughput']}, per GPU {best['throughput_per_gpu']}, "
                  f"Poisson capacity {capacity}")  # fmt: skip
    for p in result["placements"]:
        console.print(memory_line(p))
    if "routing_pays" in result:
        from tokenrouter.commands.plan_alone import print_alone

        print_alone(result, console)


def memory_line(p: dict[str, Any]) -> str:
    """Where KV memory bounds a placement: the most requests that fit, the model that runs out, the throughput."""
    bound = p.get("memory_bound")
    if not bound:
        return f"{p['label']}: no request of the workload fits in KV memory"
    sims = bound.get("sim_throughput_tok_s") or {}
    sim = "".join(f", simulated with that pool ({k}) {v:.0f}" for k, v in sims.items())
    verdict = "memory bounds the searched concurrencies" if bound["binds"] else "compute bounds the search"
    fit = f"at most {bound['concurrency']} requests fit in KV ({bound['bound_model']} runs out"
    each = f"{bound['footprint_tokens']:.0f} tokens each"
    return f"{p['label']}: {fit}, {each}): {bound['throughput_tok_s']:.0f} tok/s{sim}; {verdict}"
