"""The simulator's answer for the GPU pair at the operating points' large-model shares (no engines, seconds).

    .venv/bin/python scripts/matched_gpu_sim.py [--bench docs/bench/matched/bench.json]
        [--config configs/emulated-r2r-a100.yaml] [-n 8,32] [--tokens 20000] [--out docs/bench/matched/gpu-sim.json]

For each routing program at its committed operating point (models/local-smollm2/operating_points.json): its routing
chain as measured by the bench at that point (``routing`` in ``--bench``) and R2R's chain at the quality set's
share, simulated on ``--config``'s step latencies (the R2R paper's A100 figures) with requests of the bench's
length: routed at B = 1 and at the optimizer's B*, R2R's lockstep, and the large model alone
(``trserve.bench.gpu_sim``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trserve.bench.gpu_sim import gpu_answer
from trserve.config import load_config
from trserve.server.defaults import OPERATING_POINTS, load_operating_points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=Path("docs/bench/matched/bench.json"))
    parser.add_argument("--config", type=Path, default=Path("configs/emulated-r2r-a100.yaml"))
    parser.add_argument("-n", "--concurrency", default="8,32")
    parser.add_argument("--tokens", type=int, default=20000, help="Committed tokens simulated per point.")
    parser.add_argument("--out", type=Path, default=Path("docs/bench/matched/gpu-sim.json"))
    opts = parser.parse_args()
    started = time.monotonic()
    bench = json.loads(opts.bench.read_text())
    emulated = load_config(opts.config).model_dump(mode="json")
    ns = [int(x) for x in opts.concurrency.split(",")]
    answer = gpu_answer(bench, load_operating_points(), emulated, ns, opts.tokens)
    doc = {
        "command": "python scripts/matched_gpu_sim.py " + " ".join(sys.argv[1:]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "inputs": {
            "bench": str(opts.bench),
            "bench_command": bench.get("command"),
            "latency_config": str(opts.config),
            "operating_points": str(OPERATING_POINTS.relative_to(OPERATING_POINTS.parents[2])),
        },
        **answer,
        "wall_s": time.monotonic() - started,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in answer["rows"]:
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in r["over_large_alone"].items())
        share, alone = r["routed_b1"]["large_share"], r["large_alone"]["throughput_tok_s"]
        print(f"{r['program']:>8} N={r['concurrency']:<3} {r['chain']}: large share {share:.1%}; "
              f"large alone {alone:.0f} tok/s; {ratios}")  # fmt: skip
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
