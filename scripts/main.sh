#!/usr/bin/env bash
# The main job on embedded defaults: prepare the local model pair, start the routed server on the default config
# (small + large SmolLM2 on CPU, routed by rstitch), send it a short workload, print throughput and a sample
# answer, stop. Extra arguments go to `tokenrouter demo` (e.g. --num-requests 32 --concurrency 16).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/tokenrouter models prepare
.venv/bin/tokenrouter demo "$@"
