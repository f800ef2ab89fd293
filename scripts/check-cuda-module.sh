#!/usr/bin/env bash
# The CUDA module seam, from the built files (docs/cuda.md):
#   scripts/check-cuda-module.sh CORE_LIBRARY [MODULE]
# CORE_LIBRARY (libdeepinfer.so) needs no CUDA library (readelf -d: no NEEDED
# libcuda/libcudart/libcublas*/libnv*), so it loads on hosts without CUDA;
# MODULE (libdeepinfer-cuda.so) exports di_backend_module_create alone and
# needs no CUDA library either (the runtime is linked statically and the
# driver opened with dlopen).
set -euo pipefail
core=$1 module=${2:-}
cuda_needed() { readelf -d "$1" | awk '/NEEDED/ {print $NF}' | tr -d '[]' |
                  grep -E '^lib(cuda|cudart|cublas|cublasLt|nv|nccl)' || true; }
bad=$(cuda_needed "$core")
if [ -n "$bad" ]; then
  echo "FAIL: $core needs CUDA libraries: $bad" >&2
  exit 1
fi
echo "ok: $core needs no CUDA library ($(readelf -d "$core" | grep -c NEEDED) NEEDED entries)"
[ -n "$module" ] || exit 0
syms=$(nm -D --defined-only "$module" | awk '{print $NF}')
if [ "$syms" != "di_backend_module_create" ]; then
  echo "FAIL: $module exports more than its entry point:" >&2
  echo "$syms" | head -20 >&2
  exit 1
fi
bad=$(cuda_needed "$module")
if [ -n "$bad" ]; then
  echo "FAIL: $module needs CUDA libraries at load: $bad" >&2
  exit 1
fi
echo "ok: $module exports di_backend_module_create alone and needs no CUDA library"
