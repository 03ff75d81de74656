#!/usr/bin/env bash
# The main job on embedded defaults: tune delayed-batching thresholds for the default two-model scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/tokenrouter optimize "$@"
