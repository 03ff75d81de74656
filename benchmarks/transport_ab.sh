#!/usr/bin/env bash
# A/B of the transports on the emulated paper setting: `tokenrouter bench` (tokenrouter with B* and B = 1, markov,
# N = 2-64, two 3 s windows per cell) alternating ZeroMQ (server.transport: ipc) and the default unix sockets,
# twice each, into docs/bench-emulated/transport-ab/{ipc,unix}-{1,2}/. Run it with nothing else on the machine:
#     flock /tmp/tokenrouter-measure.lock nice -n -10 bash benchmarks/transport_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/bench-emulated/transport-ab
for rep in 1 2; do
  for transport in ipc unix; do
    config=configs/emulated-r2r-a100.yaml
    [ "$transport" = ipc ] && config=$out/ipc.yaml
    .venv/bin/tokenrouter bench --config "$config" --systems tokenrouter,tokenrouter-b1 --routers markov \
      -n 2,4,8,16,64 --repetitions 2 --warmup-s 1 --window-s 3 --no-direct --max-tokens 64 --drift skip \
      --out "$out/$transport-$rep"
  done
done
.venv/bin/python benchmarks/transport_ab.py "$out"
