#!/usr/bin/env bash
# Create (or refresh) an oracle virtual environment and print its python's path on
# the last line. Needs PyPI the first time; later runs reuse the venv.
#   scripts/oracle-venv.sh           # the codec/tokenizer oracles: tests/oracle/requirements.txt
#                                    # (+ constraints.txt), venv $DI_ORACLE_VENV or .venv-oracle
#   scripts/oracle-venv.sh --model   # the model oracles: tests/oracle/requirements-model.txt
#                                    # (+ constraints-model.txt: torch, transformers, safetensors,
#                                    # gguf, llama-cpp-python), venv $DI_MODEL_VENV or .venv-model
# Every package, the oracles' own dependencies included, is installed at the version in
# the constraints file (refresh it with pip freeze). The model venv is large (about
# 5.7 GB: torch brings the CUDA libraries from PyPI) and llama-cpp-python compiles
# llama.cpp from source the first time (about 5 minutes on 2 cores; pip keeps the
# built wheel in ~/.cache/pip, so later installs take about a minute).
# Idempotent: a stamp holding the requirements' hash skips pip when nothing changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--model" ]; then
  venv=${DI_MODEL_VENV:-$root/.venv-model}
  req=$root/tests/oracle/requirements-model.txt
  lock=$root/tests/oracle/constraints-model.txt
else
  venv=${DI_ORACLE_VENV:-$root/.venv-oracle}
  req=$root/tests/oracle/requirements.txt
  lock=$root/tests/oracle/constraints.txt
fi
want=$(cat "$req" "$lock" | sha256sum | cut -d' ' -f1)
stamp=$venv/.requirements.sha256

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "oracle-venv: up to date at $venv" >&2
else
  echo "oracle-venv: installing $(grep -c '==' "$req") pinned packages into $venv" >&2
  python3 -m venv "$venv"
  # llama-cpp-python builds with CMake: keep it to the machine's cores.
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" -c "$lock" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
