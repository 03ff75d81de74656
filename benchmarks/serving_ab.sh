#!/usr/bin/env bash
# A/B of two commits' serving path on the emulated paper setting: `tokenrouter bench` (tokenrouter with B* and
# B = 1, markov, N = 8 and 64, two 3 s windows per cell) from a snapshot of BASE and one of HEAD, alternating
# base, head, base, head, into OUT/{base,head}-{1,2}/, then each cell's rate over the throughput model and its
# server CPU per committed token side by side (OUT/summary.json, by benchmarks/transport_ab.py). Run it from the
# repository root with nothing else on the machine:
#     flock /tmp/tokenrouter-measure.lock nice -n -5 bash benchmarks/serving_ab.sh BASE [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: serving_ab.sh BASE [OUT]}
out=$(realpath -m "${2:-docs/bench-emulated/serving-ab}")
root=$(pwd)
for side in base head; do
  rm -rf "/tmp/serving-ab-$side" && mkdir -p "/tmp/serving-ab-$side"
  git archive "$([ "$side" = base ] && echo "$base" || echo HEAD)" | tar -x -C "/tmp/serving-ab-$side"
  ln -s "$root/.venv" "/tmp/serving-ab-$side/.venv"
  ln -s "$root/models/local-smollm2/checkpoints" "/tmp/serving-ab-$side/models/local-smollm2/checkpoints" 2>/dev/null || true
done
for rep in 1 2; do
  for side in base head; do
    (cd "/tmp/serving-ab-$side" && PYTHONPATH="/tmp/serving-ab-$side" "$root/.venv/bin/python" -m tokenrouter bench \
      --config configs/emulated-r2r-a100.yaml --systems tokenrouter,tokenrouter-b1 --routers markov -n 8,64 \
      --repetitions 2 --warmup-s 1 --window-s 3 --no-direct --max-tokens 64 --drift skip --out "$out/$side-$rep")
  done
done
"$root/.venv/bin/python" benchmarks/transport_ab.py "$out"
