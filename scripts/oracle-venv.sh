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
# 5.7 GB: torch brings the CUDA libraries from PyPI).
#
# llama-cpp-python is compiled from its source distribution with the fixed CMake
# options below (about 5 minutes on 2 cores), never with its default GGML_NATIVE=ON:
# -march=native compiles for whatever CPU builds it, and
#   - on a CPU with AMX (Sapphire Rapids and later Xeons, as our machines may be) it
#     enables llama.cpp's AMX kernels, and llama.cpp 0.3.36 then dies with SIGSEGV on
#     the first eval (the tiny GGUFs and SmolLM2 alike);
#   - a wheel compiled on an AVX512 machine and reused from pip's cache on one
#     without AVX512 dies with SIGILL.
# The options name one instruction set every x86-64 machine we are given has
# (x86-64-v3: SSE4.2, AVX, AVX2, FMA, F16C, BMI2) and nothing else: no AVX512, no
# AVX-VNNI, no AMX. The same kernels then run on every machine, so the llama.cpp
# fixtures are reproduced there bit for bit. The built wheel is kept in
# $DI_CACHE/wheels/<options hash>/ (DI_CACHE as in scripts/fetch_assets.py), never in
# pip's own cache (which keys a built wheel by its source alone, not by CMAKE_ARGS).
# DI_LLAMA_CPP_CMAKE_ARGS replaces the options (a benchmark anchor with AVX512, say,
# in its own DI_MODEL_VENV); the hash keeps each set's wheel apart.
# Idempotent: a stamp holding the requirements' and options' hash skips pip when
# nothing changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pip_quiet=(--quiet --disable-pip-version-check)
llama_args=""
if [ "${1:-}" = "--model" ]; then
  venv=${DI_MODEL_VENV:-$root/.venv-model}
  req=$root/tests/oracle/requirements-model.txt
  lock=$root/tests/oracle/constraints-model.txt
  llama_args=${DI_LLAMA_CPP_CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON \
-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF \
-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON"}
else
  venv=${DI_ORACLE_VENV:-$root/.venv-oracle}
  req=$root/tests/oracle/requirements.txt
  lock=$root/tests/oracle/constraints.txt
fi
want=$( (cat "$req" "$lock"; echo "$llama_args") | sha256sum | cut -d' ' -f1)
stamp=$venv/.requirements.sha256

# The llama-cpp-python wheel built with $llama_args, from the cache or compiled now;
# prints its path.
llama_wheel() {
  local version cache dir wheel
  version=$(sed -n 's/^llama[-_]cpp[-_]python==//p' "$lock")
  [ -n "$version" ] || { echo "oracle-venv: $lock pins no llama-cpp-python" >&2; exit 1; }
  cache=${DI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deepinfer}
  dir=$cache/wheels/llama-cpp-python-$version-$(echo "$llama_args" | sha256sum | cut -c1-16)
  wheel=$(ls "$dir"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    echo "oracle-venv: compiling llama-cpp-python $version with CMAKE_ARGS=$llama_args" >&2
    rm -rf "$dir.partial"
    CMAKE_ARGS=$llama_args \
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-cache-dir --no-deps \
      --no-binary llama-cpp-python -w "$dir.partial" "llama-cpp-python==$version" >&2
    rm -rf "$dir" && mv "$dir.partial" "$dir"
    wheel=$(ls "$dir"/llama_cpp_python-"$version"-*.whl)
  fi
  echo "$wheel"
}

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "oracle-venv: up to date at $venv" >&2
else
  echo "oracle-venv: installing $(grep -c '==' "$req") pinned packages into $venv" >&2
  rm -f "$stamp"
  python3 -m venv "$venv"
  extra=()
  if [ -n "$llama_args" ]; then
    extra=("$(llama_wheel)")
  fi
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" -r "$req" -c "$lock" "${extra[@]}" >&2
  if [ -n "$llama_args" ]; then
    info=$("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode())')
    echo "oracle-venv: llama.cpp runs with: $info" >&2
    if [ -z "${DI_LLAMA_CPP_CMAKE_ARGS:-}" ]; then
      # The portable build must hold no AVX-512 (zmm registers, vpdpbusd) and no
      # AMX (tile) instruction, or it would not run on every machine.
      cpu_lib=$(ls "$venv"/lib/python3*/site-packages/llama_cpp/lib/libggml-cpu.so)
      wide=$(objdump -d --no-show-raw-insn "$cpu_lib" | grep -c -E '%zmm|vpdpbusd|tdpb|ldtilecfg|tileloadd' || true)
      if [ "$wide" != 0 ]; then
        echo "oracle-venv: $cpu_lib has $wide AVX-512/AMX instructions; the wheel in $(dirname "$(llama_wheel)") was not built portable: remove it" >&2
        exit 1
      fi
      echo "oracle-venv: $(basename "$cpu_lib") holds no AVX-512 or AMX instruction" >&2
    fi
  fi
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
