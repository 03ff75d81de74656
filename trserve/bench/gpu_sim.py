"""The simulator's answer for the GPU pair at the operating points' large-model shares: routed serving against the
large model alone, with the step latencies of an emulated config (``configs/emulated-r2r-a100.yaml``: the R2R
paper's A100 figures, 1.5B 6.0 ms and 32B 27.9 ms per step).

Two routing chains per program: the one its ``tokenrouter-b1`` runs measured on the local pair at its operating
point (P and C from a bench JSON's ``routing``; the bench's prompts, so its share is the bench's, not the
question set's), and R2R's shape (every hand-off is one large-model token, the small model's token dropped) at
exactly the quality set's share ``s``: ``P = [[1 - s, s], [1, 0]]``, ``C = [[1, 0], [1, 0]]``, whose large
share is ``s``. Requests are finite (``output_tokens`` each, closed loop): a chain whose large model never hands
back (rstitch with ``tau_back`` 0) is then still well defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trcore.errors import NotIrreducibleError
from trserve.bench.predict import emulated_tables, optimize_table
from trserve.bench.sim_inputs import PROMPT_TOKENS
from trsim.baselines import apply_baseline
from trsim.build import markov_config
from trsim.driver import Simulation
from trsim.latency import TableModel
from trsim.lengths import constant
from trsim.workload import WorkloadConfig

Matrix = list[list[float]]


def r2r_shaped(share: float) -> tuple[Matrix, Matrix]:
    """R2R's chain with large-model share ``share``: the small model routes a token away with probability
    ``share``, the large model writes that one token and returns."""
    return [[1.0 - share, share], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]


def simulate_chain(P: Matrix, C: Matrix, tables: Sequence[Sequence[float]], concurrency: int, output_tokens: int,
                   tokens: int, thresholds: Sequence[int] | None = None, baseline: str = "tokenrouter",
                   ) -> dict[str, Any]:  # fmt: skip
    """Closed-loop throughput of finite requests under ``baseline`` (a ``trsim.baselines`` name) and the share of
    committed tokens the large (last) model wrote, counted from the simulator's own step records."""
    latency = [TableModel(list(range(1, len(t) + 1)), list(t)) for t in tables]
    workload = WorkloadConfig(prompt_tokens=constant(PROMPT_TOKENS), output_tokens=constant(output_tokens))
    config = markov_config(P, C, latency, thresholds, concurrency=concurrency, workload=workload, seed=0)
    sim = Simulation(apply_baseline(config, baseline), chrome_trace=True)
    result = sim.run(tokens, None, tokens // 10)
    steps = sim.steps or []
    last = sim.config.num_models - 1  # the large model (the only one of the llm-only baseline)
    large = sum(s.num_committed for s in steps if s.model == last)
    total = sum(s.num_committed for s in steps)
    return {"throughput_tok_s": float(result.throughput_tok_s), "large_share": large / total if total else 0.0,
            "thresholds": list(thresholds) if thresholds else None, "ttft_p50_s": result.ttft_p50_s,
            "tpot_p50_s": result.tpot_p50_s}  # fmt: skip


def best_thresholds(P: Matrix, C: Matrix, tables: Sequence[Sequence[float]], n: int) -> list[int] | None:
    """The optimizer's B* (under the bench's minimum gain) for this chain, or None when it has no throughput model
    (a reducible chain: the large model never hands back)."""
    try:
        return list(optimize_table(P, C, [list(t) for t in tables], [n])[n].thresholds)
    except NotIrreducibleError:
        return None


def compare(P: Matrix, C: Matrix, tables: Sequence[Sequence[float]], n: int, output_tokens: int,
            tokens: int) -> dict[str, Any]:  # fmt: skip
    """Routed at B = 1 and at B*, R2R's lockstep, and the large model alone (the simulator's ``llm-only``)."""
    out = {
        "routed_b1": simulate_chain(P, C, tables, n, output_tokens, tokens),
        "lockstep": simulate_chain(P, C, tables, n, output_tokens, tokens, baseline="lockstep"),
        "large_alone": simulate_chain(P, C, tables, n, output_tokens, tokens, baseline="llm-only"),
    }
    b_star = best_thresholds(P, C, tables, n)
    if b_star is not None and max(b_star) > 1:
        out["routed_bstar"] = simulate_chain(P, C, tables, n, output_tokens, tokens, thresholds=b_star)
    else:
        out["routed_bstar"] = {**out["routed_b1"], "note": "B* = B = 1" if b_star else "no model: B = 1 run"}
    alone = out["large_alone"]["throughput_tok_s"]
    out["over_large_alone"] = {k: out[k]["throughput_tok_s"] / alone for k in ("routed_b1", "routed_bstar", "lockstep")}
    return out


def gpu_answer(bench: Mapping[str, Any], points: Mapping[str, Any], emulated: Mapping[str, Any],
               concurrencies: Sequence[int], tokens: int = 20000) -> dict[str, Any]:  # fmt: skip
    """Per program (``points``: the committed operating points), chain and concurrency: :func:`compare` on
    ``emulated``'s latencies; routed chains from ``bench`` (measured) and R2R-shaped at the quality share."""
    names = [m["name"] for m in emulated["models"]]
    tables = emulated_tables(emulated, names, max(concurrencies))
    if tables is None:
        raise ValueError("the latency config must be a backend: emulated config")
    output_tokens = int(bench["settings"]["max_tokens"])
    rows, skipped = [], []
    for program, point in points.items():
        chains = {"r2r-shaped at the quality share": r2r_shaped(float(point["large_share"]))}
        if program in bench.get("routing", {}):
            routing = bench["routing"][program]
            chains = {"measured on the local pair (bench)": (routing["P"], routing["C"]), **chains}
        measured_share = _bench_share(bench, program)
        for chain, (P, C) in chains.items():
            for n in concurrencies:
                row = {"program": program, "params": point["params"], "chain": chain, "P": P, "C": C,
                       "concurrency": n, "quality_large_share": point["large_share"],
                       "quality_accuracy": point["accuracy"], "bench_large_share": measured_share,
                       **compare(P, C, tables, n, output_tokens, tokens)}  # fmt: skip
                if chain.startswith("measured") and not _reproduces(row["routed_b1"]["large_share"], measured_share):
                    skipped.append({"program": program, "chain": chain, "concurrency": n, "P": P, "C": C,
                                    "bench_large_share": measured_share,
                                    "simulated_large_share": row["routed_b1"]["large_share"],
                                    "reason": SKIP_REASON})  # fmt: skip
                    continue
                rows.append(row)
    return {"latencies_ms": {name: 1000 * t[0] for name, t in zip(names, tables, strict=True)},
            "output_tokens": output_tokens, "prompt_tokens": PROMPT_TOKENS, "simulated_tokens": tokens,
            "rows": rows, "skipped": skipped}  # fmt: skip


#: Why a measured chain is not simulated when it does not give the bench's share.
SKIP_REASON = ("the chain's simulated large-model share is not the bench's: its hand-offs happen where P does not "
               "count them (at admission, before the small model's first decode step), so it does not describe "
               "what ran")  # fmt: skip


def _bench_share(bench: Mapping[str, Any], program: str) -> float | None:
    """The large-model share the bench measured for ``program``'s ``tokenrouter-b1`` runs (P and C come from them)."""
    shares = [r["llm_token_fraction"] for r in bench.get("runs", [])
              if r["system"] == "tokenrouter-b1" and r["router"] == program]  # fmt: skip
    return sum(shares) / len(shares) if shares else None


def _reproduces(simulated: float, measured: float | None, tolerance: float = 0.05) -> bool:
    return measured is None or abs(simulated - measured) <= tolerance
