"""What one cross-process wake-up costs on this machine, in CPU and in delay: the floor under a subserver's per-step
messages.

    .venv/bin/python scripts/wakeup_cost.py [--messages 3000] [--out docs/bench-emulated/wakeup-cost.json]

A subserver sends two ZeroMQ messages per step (its StepReport to the front end, its hand-offs to the other model)
and sleeps through the emulated step. This measures, with nothing else of the stack, the CPU time (sender process
with libzmq's I/O thread, receiver process) of: a 6 ms sleep alone; a 3 KB ZeroMQ PUSH -> PULL message (ipc) sent
back to back and once per 6 ms sleep (a step's pace); the same once per 6 ms over a plain Unix datagram socket.
Each message carries its sending time (``time.monotonic``, one clock for every process here), so the receiver also
measures its delay: from the sender's call to the receiver's return from ``recv``, while it waited blocked (a
hand-off reaching an idle model). Run it under the measurement lock.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

SIZE = 3000  # about a StepReport of a 50-request step
STEP_S = 0.006


def _receive(kind: str, address: str, count: int, queue: Any) -> None:
    if kind == "zmq":
        sock: Any = zmq.Context().socket(zmq.PULL)
        sock.bind(address)
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address)
    queue.put("ready")
    started, delays = time.process_time(), []
    for _ in range(count):
        data = sock.recv(65536) if kind == "unix" else sock.recv()
        delays.append(time.monotonic() - struct.unpack_from("d", data)[0])
    queue.put(time.process_time() - started)
    delays.sort()
    queue.put((statistics.median(delays), delays[int(0.9 * (len(delays) - 1))]))


def per_message(kind: str, count: int, gap_s: float) -> dict[str, float]:
    """CPU microseconds per message of sender and receiver, and wall microseconds inside the send call."""
    tmp = tempfile.mkdtemp(prefix="wakeup-")
    address = f"ipc://{tmp}/inbox" if kind == "zmq" else f"{tmp}/inbox"
    queue: Any = mp.Queue()
    receiver = mp.Process(target=_receive, args=(kind, address, count, queue))
    receiver.start()
    queue.get()
    if kind == "zmq":
        sock: Any = zmq.Context().socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(address)
        send = sock.send
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        send = lambda data: sock.sendto(data, address)  # noqa: E731
    payload, inside = os.urandom(SIZE - 8), 0.0
    time.sleep(0.2)
    started = time.process_time()
    for _ in range(count):
        before = time.perf_counter()
        send(struct.pack("d", time.monotonic()) + payload)
        inside += time.perf_counter() - before
        if gap_s:
            time.sleep(gap_s)
    receiver.join()
    sender_s = time.process_time() - started
    receiver_s = queue.get()
    median_s, p90_s = queue.get()
    return {"sender_cpu_us": sender_s / count * 1e6, "wall_in_send_us": inside / count * 1e6,
            "receiver_cpu_us": receiver_s / count * 1e6, "delay_median_us": median_s * 1e6,
            "delay_p90_us": p90_s * 1e6}  # fmt: skip


def sleep_only(count: int) -> float:
    started = time.process_time()
    for _ in range(count):
        time.sleep(STEP_S)
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--out", default="docs/bench-emulated/wakeup-cost.json")
    args = parser.parse_args()
    n = args.messages
    doc = {
        "command": "python scripts/wakeup_cost.py" + (f" --messages {n}" if n != 3000 else ""),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "message_bytes": SIZE,
        "sleep_6ms_only_cpu_us": sleep_only(n),
        "zmq_back_to_back": per_message("zmq", n, 0.0),
        "zmq_one_per_6ms_sleep": per_message("zmq", n, STEP_S),
        "unix_datagram_one_per_6ms_sleep": per_message("unix", n, STEP_S),
        "note": "the *_per_6ms_sleep sender figures include the sleep's own CPU (sleep_6ms_only_cpu_us); delay: from "
        "the sender's send call to the receiver's return from recv (back to back, messages queue behind each other)",
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
