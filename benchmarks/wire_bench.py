"""Cost of the wire: encode + decode of typical messages, and one-way latency per message over a PUSH/PULL pair
on each transport (ipc; tcp with CURVE, as ``server.transport: tcp`` runs; tcp without CURVE for reference).

    .venv/bin/python benchmarks/wire_bench.py [--messages 20000] [--reps 5]

Writes benchmarks/results/wire.json. Everything runs in one process (sender and receiver in two threads), with
the real mailboxes of ``trserve.runtime.transport``; figures are medians over ``--reps`` repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trcore import PeerReq, RequestSpec
from trserve.runtime.messages import Finished, StepReport
from trserve.runtime.transport import CurveKeys, Mailbox
from trserve.runtime.wire import decode, encode

OUT = Path(__file__).resolve().parent / "results" / "wire.json"


def samples() -> dict[str, Any]:
    """A hand-off of a 300-token sequence and the step report of a 16-request decode step."""
    spec = RequestSpec("req-0123456789abcdef", 200, 100, frozenset({2}), 1.0, {"temperature": 0.0}, 0)
    handoff = PeerReq(spec.request_id, 0, tuple(range(1000, 1300)), (0, 0), 1, spec, False, {"trcore_step": 7})
    tokens = [(f"req-{i:016x}", 40 + i, (5000 + i,)) for i in range(16)]
    routes: list[tuple[str, int, int, dict[str, Any] | None]] = [(t[0], i % 2, 41, None) for i, t in enumerate(tokens)]
    report = StepReport(0, 16, 16, 0.006, 2, 16, 3, 0.1, tokens, [Finished("req-x", (1, 2, 3), "stop")], [], routes)
    return {"handoff_300_tokens": handoff, "step_report_16": report}


def codec_us(message: Any, n: int) -> float:
    data = encode(message)
    started = time.perf_counter()
    for _ in range(n):
        decode(encode(message))
    assert decode(data) == message
    return (time.perf_counter() - started) / n * 1e6


def one_way_us(bind: str, keys: CurveKeys | None, message: Any, n: int) -> float:
    """Mean time per message for ``n`` messages pushed and decoded by a receiving mailbox (pipelined)."""
    receiver = Mailbox(bind, {}, keys)
    sender = Mailbox(bind.replace("in.sock", "out.sock") if "ipc" in bind else bind, {0: receiver.address}, keys)
    got = 0

    def receive() -> None:
        nonlocal got
        while got < n:
            got += len(receiver.receive_all(1.0))

    sender.send(0, message)  # the connection (and the CURVE handshake) before the clock starts
    while not receiver.receive_all(1.0):
        pass
    thread = threading.Thread(target=receive)
    started = time.perf_counter()
    thread.start()
    for _ in range(n):
        sender.send(0, message)
    thread.join()
    elapsed = time.perf_counter() - started
    sender.close()
    receiver.close()
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": "python benchmarks/wire_bench.py " + " ".join(sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]},
        "messages_per_rep": args.messages,
        "reps": args.reps,
        "codec_us": {},
        "one_way_us": {},
    }
    with TemporaryDirectory() as tmp:
        transports = {
            "ipc": (f"ipc://{tmp}/in.sock", None),
            "tcp_curve": ("tcp://127.0.0.1:*", CurveKeys.generate()),
            "tcp_plain": ("tcp://127.0.0.1:*", None),
        }
        for name, message in samples().items():
            result["codec_us"][name] = statistics.median(codec_us(message, args.messages) for _ in range(args.reps))
            result["one_way_us"][name] = {
                transport: statistics.median(one_way_us(bind, keys, message, args.messages) for _ in range(args.reps))
                for transport, (bind, keys) in transports.items()
            }
            print(name, result["codec_us"][name], result["one_way_us"][name], flush=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
