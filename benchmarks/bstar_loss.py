"""Where delayed batching loses on the real stack: B* served four ways, alternating, at the bench's concurrencies.

    .venv/bin/python benchmarks/bstar_loss.py [-n 8,16] [--window-s 10] [--bench docs/bench-emulated/bench.json]
        [--out docs/bench-emulated/bstar-loss.json]

``tokenrouter bench`` serves B* as threshold tables keyed by the active-request count, with ``max_wait_ms: 50``.
In a closed loop the count falls to N - 1 for the moment between a request's end and the next one's arrival, and
the table's lower entry then applies; and a waiting queue launches after 50 ms whatever its size. The throughput
model has neither. Each variant here removes one or both: ``table`` (as the bench), ``fixed`` (the cell's B* as
fixed thresholds), ``table-nowait`` and ``fixed-nowait`` (no ``max_wait_ms``). Each runs ``tokenrouter serve`` on
the emulated config with the bench's B* table (from ``--bench``) and the bench's load generator (two windows per
variant and N); the JSON has every window's tok/s and each variant's mean over the bench's model prediction for
that cell. Run it under the measurement lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from trserve import eventloop
from trserve.bench.client import Workload, run_load
from trserve.bench.outputs import config_path
from trserve.server.process import ServerProcess

VARIANTS = ("table", "fixed", "table-nowait", "fixed-nowait")
MAX_WAIT_MS = 50.0


def batching(variant: str, table: dict[int, list[int]], n: int) -> dict[str, Any]:
    """The ``batching`` section of one variant at concurrency ``n``."""
    wait = None if variant.endswith("nowait") else MAX_WAIT_MS
    if variant.startswith("table"):
        tables = [{k: v[m] for k, v in table.items()} for m in range(len(table[n]))]
        return {"thresholds": [1] * len(table[n]), "tables": tables, "max_wait_ms": wait}
    return {"thresholds": table[n], "tables": None, "max_wait_ms": wait}


def windows(config: dict[str, Any], n: int, work: Workload, count: int) -> list[float]:
    """tok/s of ``count`` closed-loop windows on one server of ``config``."""
    path = Path(tempfile.mkstemp(prefix="bstar-loss-", suffix=".yaml")[1])
    path.write_text(yaml.safe_dump(config))
    server = ServerProcess(path)
    server.start(timeout_s=300)
    try:
        return [eventloop.run(run_load(server.url, n, work)).throughput_tok_s for _ in range(count)]
    finally:
        server.stop()
        path.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="8,16")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--bench", type=Path, default=Path("docs/bench-emulated/bench.json"))
    parser.add_argument("--out", type=Path, default=Path("docs/bench-emulated/bstar-loss.json"))
    args = parser.parse_args()
    bench = json.loads(args.bench.read_text())
    base = yaml.safe_load(config_path(bench).read_text())
    table = {int(k): v for k, v in bench["routing"]["markov"]["optimized_thresholds"].items()}
    model = {r["concurrency"]: r["predicted_model_tok_s"] for r in bench["runs"] if r["system"] == "tokenrouter"}
    work = Workload(64, warmup_s=1.0, window_s=args.window_s)
    rows = []
    for n in [int(x) for x in args.n.split(",")]:
        for variant in VARIANTS:
            measured = windows({**base, "batching": batching(variant, table, n)}, n, work, count=2)
            mean = statistics.mean(measured)
            rows.append({"concurrency": n, "variant": variant, "thresholds": table[n], "windows_tok_s": measured,
                         "over_model": mean / model[n], "model_tok_s": model[n]})  # fmt: skip
            print(f"N={n} {variant:13s} {' '.join(f'{t:.1f}' for t in measured)} -> {100 * mean / model[n]:.1f}%")
    doc = {"command": " ".join(["python benchmarks/bstar_loss.py", *sys.argv[1:]]),
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "bench": str(args.bench),
           "inputs": "B* tables and model predictions from the bench JSON; this run's windows",
           "rows": rows}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
